/*
 * fuzz_chat_template.c — libFuzzer harness for the Jinja interpreter
 * (engine/model/jinja*.c): a chat template is hostile input, since tenants'
 * adapters may ship one.
 *
 * Input: the template text itself. It is parsed and, when it parses,
 * rendered with a fixed conversation (system, user, assistant with a tool
 * call, tool result), two tools and enable_thinking, under small bounds
 * (1 MiB output, 64 MiB memory, 200,000 steps) so that a slow template is an
 * error, not a libFuzzer timeout. Checked: no crash, no leak, no undefined
 * behaviour; a failure says why (a non-empty message); a success returns
 * NUL-terminated text of the reported length.
 *
 *   cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang && cmake --build build-fuzz --target fuzz_chat_template
 *   mkdir -p build-fuzz/corpus_tmpl && cp tests/chat/templates/?*.jinja build-fuzz/corpus_tmpl/
 *   build-fuzz/fuzz_chat_template build-fuzz/corpus_tmpl -max_total_time=300 -max_len=65536
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/jinja.h"

static json_t *g_vars;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    g_vars = json_loads(
        "{\"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"add_generation_prompt\": true, \"enable_thinking\": false,"
        " \"documents\": null,"
        " \"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \"Weather in Oslo? \\u00fc\"},"
        "  {\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"id\": \"abc123def\", \"type\": \"function\","
        "   \"function\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"n\": 2}}}]},"
        "  {\"role\": \"tool\", \"tool_call_id\": \"abc123def\", \"content\": \"21 C\"}],"
        " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"d\","
        "   \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}},"
        "  {\"type\": \"function\", \"function\": {\"name\": \"search\", \"parameters\": {}}}]}",
        0, NULL);
    if (!g_vars) {
        fprintf(stderr, "fuzz_chat_template: bad built-in variables\n");
        abort();
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    lg_err err = {{0}};
    lg_jinja *t = NULL;
    if (lg_jinja_parse((const char *)d, n, &t, &err) != 0) {
        if (!err.msg[0])
            abort(); /* a failure must say why */
        return 0;
    }
    lg_jinja_limits lim = {.max_output = 1u << 20, .max_memory = 64u << 20, .max_steps = 200000, .max_depth = 128};
    char *out = NULL;
    size_t len = 0;
    if (lg_jinja_render(t, g_vars, &lim, &out, &len, &err) == 0) {
        if (!out || out[len] != 0)
            abort();
    } else if (!err.msg[0] || out) {
        abort();
    }
    free(out);
    lg_jinja_free(t);
    return 0;
}
