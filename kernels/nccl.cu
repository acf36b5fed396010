/*
 * nccl.cu — NCCL, loaded at run time: the CUDA backend's tensor-parallel
 * group (group.cu) runs its all-reduce through libnccl.so.2, which neither
 * the build nor a single-GPU run needs. Host code only.
 *
 * Why at run time: CI and most build machines have no NCCL, and a serving
 * binary that links it would not start without it. NCCL's C interface is
 * small and its ABI stable (nccl.cuh declares the part used), so the
 * library is opened with dlopen and its entry points taken with dlsym.
 *
 * Where from, in order (the first that loads wins):
 *   1. LG_NCCL_LIBRARY, a file path: when set, only it (an explicit choice
 *      that fails is reported, not replaced by another copy). A path, not a
 *      switch, so it is not in engine/base/tuning.c's table of integers.
 *   2. "libnccl.so.2" through the dynamic loader (LD_LIBRARY_PATH, ldconfig).
 *   3. The nvidia-nccl-cu12 / nvidia-nccl-cu13 wheel's copy,
 *      .../nvidia/nccl/lib/libnccl.so.2 under the site-packages (or
 *      dist-packages) of: $VIRTUAL_ENV, ~/.local, /usr/local/lib/python3*,
 *      /usr/lib/python3* (glob).
 *   4. The wheel as python3 on PATH finds it: `python3 -c 'import
 *      nvidia.nccl'` (a namespace package: its __path__, not __file__).
 * A failure says in one line every place looked in and how to fix it.
 *
 * Loaded once per process under a lock (any thread may ask first); a failure
 * is remembered and reported again. Never unloaded (NCCL keeps threads).
 * Needs NCCL 2.9 or later for graph capture: group.cu checks the version.
 */
#include "kernels/nccl.cuh"

#include <dlfcn.h>
#include <glob.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NCCL_SONAME "libnccl.so.2"
#define WHEEL_LIB "nvidia/nccl/lib/" NCCL_SONAME

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_state; /* 0: not tried; 1: loaded; -1: failed (g_err) */
static cu_nccl g_nccl;
static lg_err g_err;

const char *cu_nccl_version_str(int v, char *buf, size_t n)
{
    if (v >= 10000)
        snprintf(buf, n, "%d.%d.%d", v / 10000, v / 100 % 100, v % 100);
    else
        snprintf(buf, n, "%d.%d.%d", v / 1000, v / 100 % 10, v % 100);
    return buf;
}

/* dlopen + every symbol; 0, or -1 with why in `why` (the library is closed again) */
static int try_open(const char *path, char *why, size_t n)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(why, n, "%s", e ? e : "dlopen failed");
        return -1;
    }
    cu_nccl s;
    memset(&s, 0, sizeof s);
    struct {
        const char *name;
        void **slot;
    } syms[] = {
        {"ncclGetVersion", (void **)&s.get_version},   {"ncclGetErrorString", (void **)&s.error_string},
        {"ncclCommInitAll", (void **)&s.comm_init_all}, {"ncclCommDestroy", (void **)&s.comm_destroy},
        {"ncclAllReduce", (void **)&s.all_reduce},     {"ncclGroupStart", (void **)&s.group_start},
        {"ncclGroupEnd", (void **)&s.group_end},
    };
    for (size_t i = 0; i < sizeof syms / sizeof *syms; i++) {
        *syms[i].slot = dlsym(h, syms[i].name);
        if (!*syms[i].slot) {
            snprintf(why, n, "%s: no symbol %s", path, syms[i].name);
            dlclose(h);
            return -1;
        }
    }
    if (s.get_version(&s.version) != CU_NCCL_SUCCESS) {
        snprintf(why, n, "%s: ncclGetVersion failed", path);
        dlclose(h);
        return -1;
    }
    /* the file the loader took (a soname resolves to a path) */
    Dl_info info;
    const bool found = dladdr((void *)s.get_version, &info) && info.dli_fname;
    snprintf(s.path, sizeof s.path, "%s", found ? info.dli_fname : path);
    g_nccl = s;
    return 0;
}

/* the wheel's copies under a python prefix (site- or dist-packages of lib/python3*): the first that loads.
 * A copy found that does not load leaves its reason in why. */
static int try_wheel(const char *prefix, char *why, size_t n)
{
    static const char *const sub[] = {"site-packages", "dist-packages"};
    for (int k = 0; k < 2; k++) {
        char pat[1024];
        snprintf(pat, sizeof pat, "%s/lib/python3*/%s/" WHEEL_LIB, prefix, sub[k]);
        glob_t g;
        if (glob(pat, 0, NULL, &g) != 0)
            continue;
        int ok = -1;
        for (size_t i = g.gl_pathc; ok != 0 && i-- > 0;) /* the newest python3.N first */
            ok = try_open(g.gl_pathv[i], why, n);
        globfree(&g);
        if (ok == 0)
            return 0;
    }
    return -1;
}

/* the library in the nvidia.nccl package of python3 on PATH, or "" */
static void python_wheel_path(char *out, size_t n)
{
    out[0] = '\0';
    FILE *p = popen("python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null", "r");
    if (!p)
        return;
    char dir[800] = "";
    if (!fgets(dir, sizeof dir, p))
        dir[0] = '\0';
    pclose(p);
    dir[strcspn(dir, "\r\n")] = '\0';
    if (dir[0] == '/')
        snprintf(out, n, "%s/lib/" NCCL_SONAME, dir);
}

/* dlerror's text without the file name it starts with */
static const char *short_why(const char *why)
{
    const char *p = strstr(why, NCCL_SONAME ": ");
    return p ? p + strlen(NCCL_SONAME ": ") : why;
}

static int load(lg_err *err)
{
    char why_so[256] = "", why_wheel[256] = "", why_py[256] = "";
    const char *env = getenv("LG_NCCL_LIBRARY");
    if (env && *env) {
        if (try_open(env, why_so, sizeof why_so) == 0)
            return 0;
        return lg_fail(err, "NCCL: LG_NCCL_LIBRARY=%s does not load (%s); point it at a libnccl.so.2 of NCCL 2.9 or "
                            "later (the nvidia-nccl-cu12 wheel's nvidia/nccl/lib), or unset it to search", env, why_so);
    }
    if (try_open(NCCL_SONAME, why_so, sizeof why_so) == 0)
        return 0;
    const char *venv = getenv("VIRTUAL_ENV"), *home = getenv("HOME");
    if (venv && *venv && try_wheel(venv, why_wheel, sizeof why_wheel) == 0)
        return 0;
    if (home && *home) {
        char pre[600];
        snprintf(pre, sizeof pre, "%s/.local", home);
        if (try_wheel(pre, why_wheel, sizeof why_wheel) == 0)
            return 0;
    }
    if (try_wheel("/usr/local", why_wheel, sizeof why_wheel) == 0)
        return 0;
    if (try_wheel("/usr", why_wheel, sizeof why_wheel) == 0)
        return 0;
    char py[1024];
    python_wheel_path(py, sizeof py);
    if (py[0] && try_open(py, why_py, sizeof why_py) == 0)
        return 0;
    /* the fix first: a long line is cut at its end */
    return lg_fail(err,
                   "NCCL not found (pip install nvidia-nccl-cu12, or set LG_NCCL_LIBRARY to a libnccl.so.2); looked "
                   "in: dlopen(" NCCL_SONAME ") [%s]; {$VIRTUAL_ENV (%s), ~/.local, /usr/local, /usr}/lib/python3*/"
                   "{site,dist}-packages/" WHEEL_LIB " [%s]; python3's nvidia.nccl [%s%s%s]",
                   short_why(why_so), venv && *venv ? venv : "unset", why_wheel[0] ? why_wheel : "none",
                   py[0] ? py : "not installed", why_py[0] ? ": " : "", why_py);
}

const cu_nccl *cu_nccl_load(lg_err *err)
{
    pthread_mutex_lock(&g_lock);
    if (g_state == 0)
        g_state = load(&g_err) == 0 ? 1 : -1;
    const int st = g_state;
    pthread_mutex_unlock(&g_lock);
    if (st < 0) {
        if (err)
            *err = g_err;
        return NULL;
    }
    return &g_nccl;
}
