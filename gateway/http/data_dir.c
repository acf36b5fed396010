/*
 * data_dir.c — see data_dir.h. Removal works on directory file
 * descriptors (openat/unlinkat, O_NOFOLLOW), so a symbolic link in tmp/ is
 * removed as a link and nothing outside tmp/ is ever touched.
 */
#include "gateway/http/data_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int lg_data_dir_prepare(const char *dir, FILE *warn, bool *created, lg_err *err)
{
    *created = false;
    if (!dir || !*dir)
        return lg_fail(err, "a data directory is required");
    if (mkdir(dir, 0700) == 0) {
        *created = true;
        /* mkdir's mode passes through the umask: make it exactly 0700 */
        if (chmod(dir, 0700) != 0)
            return lg_fail(err, "cannot set the mode of the data directory %s: %s", dir, strerror(errno));
        return 0;
    }
    if (errno != EEXIST)
        return lg_fail(err, "cannot create the data directory %s: %s", dir, strerror(errno));
    struct stat st;
    if (stat(dir, &st) != 0)
        return lg_fail(err, "cannot check the data directory %s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return lg_fail(err, "the data directory %s is not a directory", dir);
    if ((st.st_mode & 077) && warn)
        fprintf(warn,
                "loragate: warning: the data directory %s is accessible by other users (mode %04o); it holds the "
                "database and secret keys: chmod 700 %s\n",
                dir, (unsigned)(st.st_mode & 07777), dir);
    return 0;
}

bool lg_data_dir_tmp_name_ours(const char *name)
{
    static const char *const prefixes[] = {"upload-", "put-", "h2o.b."};
    for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++) {
        size_t n = strlen(prefixes[i]);
        if (!strncmp(name, prefixes[i], n) && name[n])
            return true;
    }
    return false;
}

/* Removes dfd/name: a file or link, or a directory with its content (our
 * directories hold two files; depth bounded all the same). */
static int remove_at(int dfd, const char *name, int depth, lg_err *err)
{
    struct stat st;
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return errno == ENOENT ? 0 : lg_fail(err, "%s: %s", name, strerror(errno));
    if (!S_ISDIR(st.st_mode)) {
        if (unlinkat(dfd, name, 0) != 0 && errno != ENOENT)
            return lg_fail(err, "removing %s: %s", name, strerror(errno));
        return 0;
    }
    if (depth >= 8)
        return lg_fail(err, "%s: directories nested too deep", name);
    int sub = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub < 0)
        return lg_fail(err, "opening %s: %s", name, strerror(errno));
    DIR *d = fdopendir(sub);
    if (!d) {
        int e = errno;
        close(sub);
        return lg_fail(err, "opening %s: %s", name, strerror(e));
    }
    int rc = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        if (remove_at(dirfd(d), de->d_name, depth + 1, err) != 0)
            rc = -1;
    }
    closedir(d);
    if (rc == 0 && unlinkat(dfd, name, AT_REMOVEDIR) != 0 && errno != ENOENT)
        rc = lg_fail(err, "removing %s: %s", name, strerror(errno));
    return rc;
}

int lg_data_dir_clean_tmp(const char *dir, int *removed, int *failed, lg_err *err)
{
    *removed = *failed = 0;
    char tmp[4096];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s/tmp", dir) >= sizeof tmp)
        return lg_fail(err, "data directory path too long");
    int fd = open(tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return 0;
        return lg_fail(err, "cannot open %s: %s", tmp, strerror(errno));
    }
    DIR *d = fdopendir(fd);
    if (!d) {
        int e = errno;
        close(fd);
        return lg_fail(err, "cannot read %s: %s", tmp, strerror(e));
    }
    /* collect the names first: removing while readdir walks is allowed,
     * but a plain list keeps the walk obviously finite */
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    int rc = 0;
    while ((de = readdir(d)) != NULL) {
        if (!lg_data_dir_tmp_name_ours(de->d_name))
            continue;
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 16;
            char **p = realloc(names, nc * sizeof *p);
            if (!p) {
                rc = lg_fail(err, "out of memory");
                break;
            }
            names = p;
            cap = nc;
        }
        if (!(names[n] = strdup(de->d_name))) {
            rc = lg_fail(err, "out of memory");
            break;
        }
        n++;
    }
    lg_err first = {{0}};
    for (size_t i = 0; i < n; i++) {
        lg_err e = {{0}};
        if (rc == 0 && remove_at(dirfd(d), names[i], 0, &e) == 0) {
            (*removed)++;
        } else if (rc == 0) {
            (*failed)++;
            if (!first.msg[0])
                first = e;
        }
        free(names[i]);
    }
    free(names);
    closedir(d);
    if (rc == 0 && first.msg[0])
        *err = first;
    return rc;
}
