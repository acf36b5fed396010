/*
 * weights_hfquant.h — the Hub's quantized checkpoints (config.json
 * "quantization_config") read into the planar layouts of backend.h. Used by
 * weights_hf.c only; see weights_hfquant.c for the formats and their rules.
 *
 * Use: lg_hfquant_open on the quantization_config object (refuses what it
 * cannot serve), then for every safetensors tensor lg_hfquant_take (holds
 * the tensors of quantized modules: their data stay in the file mappings,
 * which the weights keep alive), then lg_hfquant_finish repacks each module
 * into one tensor "<module>.weight" and adds it to the weights; then
 * lg_hfquant_free. lg_hfquant_describe names the scheme for the config.
 */
#ifndef LG_WEIGHTS_HFQUANT_H
#define LG_WEIGHTS_HFQUANT_H

#include <jansson.h>

#include "engine/model/safetensors.h"
#include "engine/model/weights.h"

typedef struct lg_hfquant lg_hfquant;

int lg_hfquant_open(json_t *qc, const lg_load_opts *opts, lg_hfquant **out, lg_err *err);
void lg_hfquant_free(lg_hfquant *h); /* NULL is a no-op */
/* The scheme: machine name ("fp8", "awq", ...) and a short human description, copied into cfg's quant_method
 * and quant_desc. */
void lg_hfquant_describe(const lg_hfquant *h, lg_model_config *cfg);
/* 1: t (under its normalised name) belongs to a quantized module and is held; 0: not ours, load it as usual;
 * -1: refused (err set). t's data must outlive lg_hfquant_finish (the file mapping is kept by the weights). */
int lg_hfquant_take(lg_hfquant *h, const char *name, const lg_st_tensor *t, lg_err *err);
/* Repacks every held module into w. */
int lg_hfquant_finish(lg_hfquant *h, lg_weights *w, lg_err *err);

#endif
