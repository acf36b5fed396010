/*
 * test_data_dir.c — gateway/http/data_dir.c: the data directory is created 0700
 * whatever the umask; one the operator made is never changed, and gets one
 * warning line when others may enter it; leftovers of a previous process in
 * DATA_DIR/tmp (upload-*, put-*, h2o.b.*) are removed with their content,
 * anything else there stays, and a symbolic link is removed, not followed.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gateway/http/data_dir.h"
#include "tests/unit/test.h"

static char root[256];

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

static void path_of(char *out, size_t cap, const char *rel) { snprintf(out, cap, "%s/%s", root, rel); }

static unsigned mode_of(const char *rel)
{
    char p[512];
    path_of(p, sizeof p, rel);
    struct stat st;
    return lstat(p, &st) == 0 ? (unsigned)(st.st_mode & 07777) : 0xffffffffu;
}

static bool exists(const char *rel)
{
    char p[512];
    path_of(p, sizeof p, rel);
    struct stat st;
    return lstat(p, &st) == 0;
}

static void touch(const char *rel)
{
    char p[512];
    path_of(p, sizeof p, rel);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) {
        (void)!write(fd, "x", 1);
        close(fd);
    }
    CHECK_MSG(fd >= 0, "touch %s: %s", p, strerror(errno));
}

static void mk(const char *rel, mode_t mode)
{
    char p[512];
    path_of(p, sizeof p, rel);
    CHECK_MSG(mkdir(p, mode) == 0, "mkdir %s: %s", p, strerror(errno));
}

/* lg_data_dir_prepare with its warning captured */
static int prepare(const char *rel, bool *created, char *warn, size_t cap, lg_err *err)
{
    char p[512];
    path_of(p, sizeof p, rel);
    FILE *f = tmpfile();
    int rc = lg_data_dir_prepare(p, f, created, err);
    warn[0] = 0;
    if (f) {
        rewind(f);
        size_t n = fread(warn, 1, cap - 1, f);
        warn[n] = 0;
        fclose(f);
    }
    return rc;
}

static int lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

static void test_prepare(void)
{
    lg_err err = {{0}};
    bool created = false;
    char warn[1024];
    mode_t old = umask(022);
    CHECK_MSG(prepare("new", &created, warn, sizeof warn, &err) == 0, "%s", err.msg);
    CHECK(created && mode_of("new") == 0700 && warn[0] == 0);
    /* a umask that would take the owner's bits: still exactly 0700 */
    umask(0277);
    CHECK_MSG(prepare("new2", &created, warn, sizeof warn, &err) == 0, "%s", err.msg);
    CHECK(created && mode_of("new2") == 0700);
    umask(022);
    /* again: it exists now, nothing to say */
    CHECK(prepare("new", &created, warn, sizeof warn, &err) == 0 && !created && warn[0] == 0);
    /* the operator's own directory, open to others: one line, no change */
    mk("opdir", 0755);
    chmod(root, 0700);
    char p[512];
    path_of(p, sizeof p, "opdir");
    chmod(p, 0755);
    CHECK(prepare("opdir", &created, warn, sizeof warn, &err) == 0 && !created);
    CHECK_MSG(lines(warn) == 1 && strstr(warn, "0755") && strstr(warn, "chmod 700") && strstr(warn, p), "%s", warn);
    CHECK(mode_of("opdir") == 0755);
    chmod(p, 0710);
    CHECK(prepare("opdir", &created, warn, sizeof warn, &err) == 0 && lines(warn) == 1 && mode_of("opdir") == 0710);
    chmod(p, 0700);
    CHECK(prepare("opdir", &created, warn, sizeof warn, &err) == 0 && warn[0] == 0);
    /* not a directory; a missing parent */
    touch("afile");
    CHECK(prepare("afile", &created, warn, sizeof warn, &err) == -1 && strstr(err.msg, "not a directory"));
    CHECK(prepare("no/such/dir", &created, warn, sizeof warn, &err) == -1 && strstr(err.msg, "cannot create"));
    umask(old);
}

static void test_names(void)
{
    const char *ours[] = {"upload-abc123", "upload-x", "put-Qw3rTy", "h2o.b.AbC123"};
    const char *not_ours[] = {"upload-", "put-", "h2o.b.", "upload", "put", "uploads", "x-upload-1", "keep",
                              ".upload-1", "h2o.c.1", "PUT-1", "."};
    for (size_t i = 0; i < sizeof ours / sizeof *ours; i++)
        CHECK_MSG(lg_data_dir_tmp_name_ours(ours[i]), "%s", ours[i]);
    for (size_t i = 0; i < sizeof not_ours / sizeof *not_ours; i++)
        CHECK_MSG(!lg_data_dir_tmp_name_ours(not_ours[i]), "%s", not_ours[i]);
}

static void test_clean(void)
{
    lg_err err = {{0}};
    int removed = -1, failed = -1;
    char d[512];
    mk("dd", 0700);
    path_of(d, sizeof d, "dd");
    /* no tmp/ yet: nothing to do */
    CHECK_MSG(lg_data_dir_clean_tmp(d, &removed, &failed, &err) == 0, "%s", err.msg);
    CHECK(removed == 0 && failed == 0);
    mk("dd/tmp", 0700);
    mk("dd/tmp/upload-a1", 0700); /* an upload directory with both files */
    touch("dd/tmp/upload-a1/adapter_config.json");
    touch("dd/tmp/upload-a1/adapter_model.safetensors");
    touch("dd/tmp/upload-b2"); /* an upload file (lg_store_tmp_file) */
    mk("dd/tmp/put-c3", 0700);
    touch("dd/tmp/put-c3/adapter_config.json");
    mk("dd/tmp/put-c3/deeper", 0700);
    touch("dd/tmp/put-c3/deeper/x");
    touch("dd/tmp/h2o.b.d4");
    mk("dd/tmp/upload-empty", 0700);
    /* not ours: stays */
    touch("dd/tmp/keep-me");
    mk("dd/tmp/other", 0700);
    touch("dd/tmp/other/upload-inner");
    /* a link named like ours, to a directory outside tmp/: the link goes, its target stays */
    mk("outside", 0700);
    touch("outside/victim");
    char target[512], link[512];
    path_of(target, sizeof target, "outside");
    path_of(link, sizeof link, "dd/tmp/upload-link");
    CHECK(symlink(target, link) == 0);
    CHECK_MSG(lg_data_dir_clean_tmp(d, &removed, &failed, &err) == 0, "%s", err.msg);
    CHECK_MSG(removed == 6 && failed == 0, "removed %d failed %d", removed, failed);
    CHECK(!exists("dd/tmp/upload-a1") && !exists("dd/tmp/upload-b2") && !exists("dd/tmp/put-c3") &&
          !exists("dd/tmp/h2o.b.d4") && !exists("dd/tmp/upload-empty") && !exists("dd/tmp/upload-link"));
    CHECK(exists("dd/tmp") && exists("dd/tmp/keep-me") && exists("dd/tmp/other/upload-inner"));
    CHECK(exists("outside/victim"));
    /* a second start finds nothing */
    CHECK(lg_data_dir_clean_tmp(d, &removed, &failed, &err) == 0 && removed == 0 && failed == 0);
    /* tmp/ that is not a directory (a link to one): refused, target untouched */
    char tmpd[512];
    path_of(tmpd, sizeof tmpd, "dd/tmp");
    nftw(tmpd, rm_one, 8, FTW_DEPTH | FTW_PHYS);
    mk("outside/upload-z", 0700);
    CHECK(symlink(target, tmpd) == 0);
    CHECK(lg_data_dir_clean_tmp(d, &removed, &failed, &err) == -1 && removed == 0);
    CHECK(exists("outside/upload-z"));
}

int main(void)
{
    const char *base = getenv("TMPDIR");
    snprintf(root, sizeof root, "%s/lg-datadir-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 2;
    }
    test_prepare();
    test_names();
    test_clean();
    nftw(root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    TEST_DONE();
}
