/*
 * cli.h — the subcommands of the loragate binary. Each returns the process
 * exit code: 0 success, 1 runtime failure (message on stderr, one line),
 * 2 bad usage.
 */
#ifndef LG_CLI_H
#define LG_CLI_H

#include "engine/base/version.h"

int lg_cmd_generate(int argc, char **argv);
int lg_cmd_bench(int argc, char **argv);
int lg_cmd_tokenize(int argc, char **argv);
int lg_cmd_chat_template(int argc, char **argv);
int lg_cmd_serve(int argc, char **argv); /* cmd_serve.c: the HTTPS gateway */
int lg_cmd_backup(int argc, char **argv); /* cmd_backup.c: online backup of the database */

#endif
