/*
 * test_tuning.c — the table of LG_* switches (engine/base/tuning.c):
 * every field of lg_tuning has exactly one row, names are unique LG_* names,
 * defaults and environment values land in the right fields, unknown LG_*
 * variables are ignored, and a backend reads its switches at create.
 *
 *   test_tuning --markdown   prints the table as docs/architecture.md keeps it
 */
#include "engine/backend/backend.h"
#include "engine/base/tuning.h"
#include "tests/unit/test.h"

#include <stdlib.h>

static int print_markdown(void)
{
    printf("| switch | default | effect | read by (set by tests) |\n|---|---|---|---|\n");
    for (int i = 0; i < lg_tuning_count; i++) {
        const lg_tuning_switch *s = &lg_tuning_table[i];
        printf("| `%s` | %d | %s | %s |\n", s->name, s->def, s->effect, s->reader);
    }
    return 0;
}

static void unset_all(void)
{
    for (int i = 0; i < lg_tuning_count; i++) unsetenv(lg_tuning_table[i].name);
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--markdown"))
        return print_markdown();

    /* the table covers lg_tuning: one row per int field, each offset once */
    CHECK(lg_tuning_count == (int)(sizeof(lg_tuning) / sizeof(int)));
    unsigned char seen[sizeof(lg_tuning) / sizeof(int)] = {0};
    for (int i = 0; i < lg_tuning_count; i++) {
        const lg_tuning_switch *s = &lg_tuning_table[i];
        CHECK_MSG(s->offset % sizeof(int) == 0 && s->offset < sizeof(lg_tuning), "%s: offset %zu", s->name,
                  s->offset);
        if (s->offset < sizeof(lg_tuning)) {
            CHECK_MSG(!seen[s->offset / sizeof(int)], "%s: a field with two rows", s->name);
            seen[s->offset / sizeof(int)] = 1;
        }
        CHECK_MSG(!strncmp(s->name, "LG_", 3) && strlen(s->name) > 3, "name %s", s->name);
        CHECK_MSG(s->effect && *s->effect && s->reader && *s->reader, "%s: effect and reader", s->name);
        for (int j = 0; j < i; j++) CHECK_MSG(strcmp(s->name, lg_tuning_table[j].name) != 0, "%s twice", s->name);
    }

    /* defaults */
    lg_tuning d;
    memset(&d, 0x7f, sizeof d);
    lg_tuning_defaults(&d);
    for (int i = 0; i < lg_tuning_count; i++) CHECK(lg_tuning_value(&d, i) == lg_tuning_table[i].def);
    CHECK(d.burst == 1 && d.no_graphs == 0 && d.streamk == 2 && d.l2_hint == 3 && d.dec_resident_kb == 200);

    /* the environment: unset or empty is the default, a value is read as an integer, other LG_* names are ignored */
    unset_all();
    lg_tuning t;
    lg_tuning_read(&t);
    CHECK(memcmp(&t, &d, sizeof t) == 0);
    setenv("LG_BURST", "0", 1);
    setenv("LG_NO_GRAPHS", "1", 1);
    setenv("LG_GEMV", "11", 1);
    setenv("LG_STEP_TIMING", "", 1);
    setenv("LG_SKINNY", "1", 1);      /* a switch no longer in the table */
    setenv("LG_NOT_A_SWITCH", "7", 1);
    lg_tuning_read(&t);
    CHECK(t.burst == 0 && t.no_graphs == 1 && t.gemv == 11 && t.step_timing == 0);
    for (int i = 0; i < lg_tuning_count; i++) {
        const char *n = lg_tuning_table[i].name;
        if (strcmp(n, "LG_BURST") && strcmp(n, "LG_NO_GRAPHS") && strcmp(n, "LG_GEMV"))
            CHECK_MSG(lg_tuning_value(&t, i) == lg_tuning_table[i].def, "%s", n);
    }
    unsetenv("LG_SKINNY");
    unsetenv("LG_NOT_A_SWITCH");

    /* LG_DEBUG_ERRORS: error messages end with file:line from the read on */
    lg_err err;
    setenv("LG_DEBUG_ERRORS", "1", 1);
    lg_tuning_read(&t);
    lg_fail(&err, "x");
    CHECK(strstr(err.msg, "test_tuning.c:") != NULL);
    unsetenv("LG_DEBUG_ERRORS");
    lg_tuning_read(&t);
    lg_fail(&err, "x");
    CHECK(!strcmp(err.msg, "x"));

    /* a backend reads the environment at create, into be->tune */
    unset_all();
    setenv("LG_CPU_DEVICE_SAMPLE", "1", 1);
    setenv("LG_BURST", "0", 1);
    lg_backend *be = NULL;
    lg_backend_opts o = {.n_threads = 1};
    CHECK(lg_backend_cpu_create(&o, &be, &err) == 0);
    if (be) {
        CHECK(lg_backend_tuning(be)->cpu_device_sample == 1 && lg_backend_tuning(be)->burst == 0);
        CHECK(be->i.sample != NULL);
        lg_backend_free(be);
        be = NULL;
    }
    unset_all();
    CHECK(lg_backend_cpu_create(&o, &be, &err) == 0);
    if (be) {
        CHECK(be->i.sample == NULL && lg_backend_tuning(be)->burst == 1);
        lg_backend_free(be);
    }
    TEST_DONE();
}
