/*
 * stop_strings.h — stop-string matching over streamed text.
 *
 * Text arrives in pieces (from lg_detok). The matcher releases text only
 * when it can no longer be the start of a stop string, so a stop string
 * split across pieces is still caught and never shown to the user (OpenAI
 * semantics: the matched stop string is not part of the output).
 */
#ifndef LG_STOP_STRINGS_H
#define LG_STOP_STRINGS_H

#include "engine/base/common.h"

typedef struct lg_stopper lg_stopper;

/* Copies the strings. Empty strings are ignored. NULL on out of memory. */
lg_stopper *lg_stopper_new(const char *const *stops, int n);
void lg_stopper_free(lg_stopper *s); /* NULL is a no-op */

/* Feeds a piece. Returns the text that is now safe to emit (pointer valid
 * until the next call; length in *len). *matched is set once a stop string
 * has been seen; the returned text then ends right before it, and further
 * pushes return nothing. */
const char *lg_stopper_push(lg_stopper *s, const char *piece, size_t n, size_t *len, bool *matched);
/* At the end of generation: releases any held-back text. */
const char *lg_stopper_flush(lg_stopper *s, size_t *len);

#endif
