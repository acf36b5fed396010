/*
 * main.c — `loragate <command> [options]`: dispatch to one file per command.
 */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: loragate <command> [options]\n"
            "\n"
            "commands:\n"
            "  generate       run a prompt through a model (loragate generate --help)\n"
            "  bench          time a fixed batch, optionally with many adapters\n"
            "  tokenize       encode JSON lines of text with a model's tokenizer\n"
            "  chat-template  render chat messages with a model's chat template\n"
            "  serve          run the HTTPS gateway (loragate serve --help)\n"
            "  backup         online backup of a data dir's database (loragate backup --help)\n"
            "  version        print the version\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "generate"))
        return lg_cmd_generate(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench"))
        return lg_cmd_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "tokenize"))
        return lg_cmd_tokenize(argc - 1, argv + 1);
    if (!strcmp(cmd, "serve"))
        return lg_cmd_serve(argc - 1, argv + 1);
    if (!strcmp(cmd, "backup"))
        return lg_cmd_backup(argc - 1, argv + 1);
    if (!strcmp(cmd, "chat-template"))
        return lg_cmd_chat_template(argc - 1, argv + 1);
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        printf("loragate %s\n", LG_VERSION);
        return 0;
    }
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "loragate: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
