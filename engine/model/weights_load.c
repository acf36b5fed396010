/*
 * weights_load.c — lg_weights_load: opens a model from a path by picking the
 * loader for what the path is.
 *
 *   a directory                              -> lg_weights_load_hf   (weights_hf.c)
 *   a file named *.gguf, or with GGUF magic  -> lg_weights_load_gguf (weights_gguf.c)
 *   anything else                            -> refused, naming what was found
 *
 * then, for opts->quantize (`--quantization`), lg_weights_quantize
 * (weights_quantize.c) over whatever was loaded (dummy weights included).
 *
 * The only file of the model's weights that knows every format. Calls point
 * one way: weights_load.c -> weights_hf.c, weights_gguf.c -> weights.c (the
 * format-independent container); nothing calls back into this file.
 */
#include "engine/model/weights.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

static int load_any(const char *path, const lg_load_opts *opts, lg_weights **out, lg_err *err);

int lg_weights_load(const char *path, const lg_load_opts *opts, lg_weights **out, lg_err *err)
{
    if (load_any(path, opts, out, err))
        return -1;
    /* dummy weights were made quantized (lg_weights_dummy_quantized) */
    if (opts && opts->quantize != LG_QNONE && !opts->vocab_only && !opts->dummy &&
        lg_weights_quantize(*out, opts->quantize, err)) {
        lg_err_prefix(err, "--quantization");
        lg_weights_free(*out);
        *out = NULL;
        return -1;
    }
    return 0;
}

static int load_any(const char *path, const lg_load_opts *opts, lg_weights **out, lg_err *err)
{
    *out = NULL;
    struct stat st;
    if (stat(path, &st) != 0)
        return lg_fail(err, "cannot open model %s: %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode))
        return lg_weights_load_hf(path, opts, out, err);
    if (!S_ISREG(st.st_mode))
        return lg_fail(err, "model %s: expected a directory or a .gguf file, found neither", path);
    size_t len = strlen(path);
    if (len >= 5 && !strcasecmp(path + len - 5, ".gguf"))
        return lg_weights_load_gguf(path, opts, out, err);
    char magic[4] = {0};
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return lg_fail(err, "cannot open model %s: %s", path, strerror(errno));
    ssize_t got = read(fd, magic, 4);
    close(fd);
    if (got == 4 && !memcmp(magic, "GGUF", 4))
        return lg_weights_load_gguf(path, opts, out, err);
    if (len >= 12 && !strcmp(path + len - 12, ".safetensors"))
        return lg_fail(err, "model %s: expected a model directory (config.json + safetensors), found a single "
                            ".safetensors file: pass its directory", path);
    return lg_fail(err, "model %s: expected a Hugging Face directory or a GGUF file, found a file without the "
                        "GGUF magic", path);
}
