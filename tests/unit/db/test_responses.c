/*
 * test_responses.c — stored /v1/responses (db/responses.h) on a real
 * database: put and get back byte for byte, another tenant's id is not
 * found, expired rows are invisible and removed by the next put, delete
 * removes once (then not found), a reader connection sees the writer's
 * rows, and a reader cannot write.
 */
#include "db/responses.h"

#include "tests/unit/db/db_test_util.h"

int main(void)
{
    char dir[512];
    tu_tmpdir(dir, sizeof dir, "responses");
    lg_store *st = NULL, *rd = NULL;
    lg_err err = {{0}};
    CHECK(lg_store_open(dir, &st, &err) == 0);
    CHECK(lg_store_open_reader(dir, &rd, &err) == 0);
    const char *resp = "{\"id\":\"resp_1\",\"output\":[{\"type\":\"message\",\"text\":\"h\\u00e9\"}]}";
    const char *conv = "[{\"role\":\"user\",\"content\":\"hi\"}]";
    CHECK(lg_store_response_put(st, "resp_1", 7, 1000, 5000, resp, conv, 1000, &err) == 0);
    CHECK(lg_store_response_put(st, "resp_old", 7, 100, 900, "{}", "[]", 100, &err) == 0);
    char *r = NULL, *c = NULL;
    CHECK(lg_store_response_get(rd, "resp_1", 7, 2000, &r, &c, &err) == 0);
    CHECK(r && !strcmp(r, resp) && c && !strcmp(c, conv));
    free(r);
    free(c);
    /* another tenant */
    CHECK(lg_store_response_get(rd, "resp_1", 8, 2000, &r, NULL, &err) == LG_STORE_NOT_FOUND && !r);
    CHECK(lg_store_response_delete(st, "resp_1", 8, 2000, &err) == LG_STORE_NOT_FOUND);
    /* expired: invisible, then removed by the next put */
    CHECK(lg_store_response_get(rd, "resp_old", 7, 1000, NULL, &c, &err) == LG_STORE_NOT_FOUND && !c);
    CHECK(lg_store_response_get(rd, "resp_1", 7, 5000, &r, NULL, &err) == LG_STORE_NOT_FOUND);
    CHECK(lg_store_response_put(st, "resp_2", 7, 2000, 9000, "{}", "[]", 2000, &err) == 0);
    sqlite3 *db = NULL;
    char path[600];
    snprintf(path, sizeof path, "%s/loragate.db", dir);
    CHECK(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
    sqlite3_stmt *s = NULL;
    CHECK(sqlite3_prepare_v2(db, "SELECT count(*) FROM responses WHERE id = 'resp_old'", -1, &s, NULL) == SQLITE_OK);
    CHECK(sqlite3_step(s) == SQLITE_ROW && sqlite3_column_int(s, 0) == 0);
    sqlite3_finalize(s);
    sqlite3_close(db);
    /* delete once */
    CHECK(lg_store_response_delete(st, "resp_1", 7, 2000, &err) == 0);
    CHECK(lg_store_response_delete(st, "resp_1", 7, 2000, &err) == LG_STORE_NOT_FOUND);
    CHECK(lg_store_response_get(rd, "resp_1", 7, 2000, &r, NULL, &err) == LG_STORE_NOT_FOUND);
    /* a reader cannot write */
    CHECK(lg_store_response_put(rd, "resp_3", 7, 1, 9, "{}", "[]", 1, &err) != 0);
    lg_store_close(rd);
    lg_store_close(st);
    tu_rmtree(dir);
    TEST_DONE();
}
