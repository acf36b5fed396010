/*
 * fuzz_chat.c — libFuzzer harness for chat template rendering
 * (engine/model/chat_template.c): the messages of /v1/chat/completions come from
 * tenants; the template from the model.
 *
 * Input layout: byte 0 picks one of the real templates of tests/chat/templates
 * (modulo their count); the rest is a list of messages separated by 0x00,
 * each a role byte (modulo 3: system, user, assistant) then its content.
 * A render that succeeds must hold every user message's content, up to the
 * ends that templates may `| trim` (Python's str.strip, which also takes
 * Unicode spaces, so any byte <= 0x20 or >= 0x7f at either end is let go);
 * system and assistant texts are not checked (the Llama-2 templates drop a
 * system message that no user message follows, as jinja2 does); a render
 * that fails must say why. The templates' exact output is tests/chat's job
 * (against jinja2); this looks for crashes, undefined behaviour and lost text.
 *
 *   cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang && cmake --build build-fuzz --target fuzz_chat
 *   build-fuzz/fuzz_chat -max_total_time=300 -max_len=1024      (from the repo root, or LG_ROOT=repo)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/chat_template.h"

static const char *const k_files[] = {
    "chatml-openhermes.jinja",   "llama2-chat-xinference.jinja", "llama2-transformers-default.jinja",
    "llama3-8b-instruct.jinja",  "llama3.1-8b-instruct.jinja",   "llama3.2-3b-instruct.jinja",
    "mistral-v0.1-orig.jinja",   "mistral-v0.1-xinference.jinja", "mistral-v1-with-system.jinja",
    "mixtral-v0.1-orig.jinja",   "qwen2.5-7b-instruct.jinja",    "smollm2.jinja",
};
#define N_T (sizeof k_files / sizeof k_files[0])
static lg_chat_template *g_t[N_T];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    const char *root = getenv("LG_ROOT");
    for (size_t i = 0; i < N_T; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s%stests/chat/templates/%s", root ? root : "", root ? "/" : "", k_files[i]);
        char *b = NULL;
        lg_err err = {0};
        if (lg_read_file(path, 1u << 20, &b, NULL, &err) != 0 ||
            lg_chat_template_new(b, NULL, "<s>", "</s>", &g_t[i], &err) != 0) {
            fprintf(stderr, "fuzz_chat: %s: %s\n", path, err.msg);
            exit(1);
        }
        free(b);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    if (n < 1)
        return 0;
    static const char *const roles[3] = {"system", "user", "assistant"};
    const lg_chat_template *t = g_t[d[0] % N_T];
    char *buf = malloc(n); /* the messages, NUL-terminated in place */
    memcpy(buf, d + 1, n - 1);
    buf[n - 1] = 0;
    lg_chat_msg msgs[64];
    int k = 0;
    for (size_t i = 0; i + 1 < n && k < 64;) {
        const size_t len = strlen(buf + i);
        msgs[k].role = roles[(uint8_t)buf[i] % 3];
        msgs[k].content = len ? buf + i + 1 : "";
        k++;
        i += len + 1;
    }
    char *out = NULL;
    lg_err err = {0};
    const int rc = lg_chat_template_apply(t, msgs, k, &out, &err);
    if (rc == 0) {
        if (!out)
            abort();
        for (int i = 0; i < k; i++) {
            if (strcmp(msgs[i].role, "user") != 0)
                continue;
            const char *c = msgs[i].content;
            size_t a = 0, b = strlen(c);
            while (a < b && ((uint8_t)c[a] <= 0x20 || (uint8_t)c[a] >= 0x7f)) a++;
            while (b > a && ((uint8_t)c[b - 1] <= 0x20 || (uint8_t)c[b - 1] >= 0x7f)) b--;
            if (b > a && !memmem(out, strlen(out), c + a, b - a))
                abort(); /* a message's content lost */
        }
    } else if (out || !err.msg[0]) {
        abort();
    }
    free(out);
    free(buf);
    return 0;
}
