/*
 * money.h — prices and costs as integers, never floats.
 *
 * Units:
 *   price: micro-USD per million tokens (int64). "0.15" USD/Mtok = 150000.
 *   cost:  pico-USD (1e-12 USD, int64).
 * One token at p micro-USD/Mtok costs p * 1e-6 / 1e6 USD = p pico-USD, so
 *   cost = (prompt - cached) * input + cached * cached_input + completion * output
 * is an exact integer in pico-USD: no rounding anywhere, and every aggregate
 * is the exact sum of its records. int64 pico-USD holds up to about
 * 9.2 million USD; every operation that could go past it is checked and
 * fails rather than wraps.
 *
 * Prices come from admins as decimal strings or JSON numbers in USD per
 * million tokens with at most 6 decimals ("input_per_mtok": "0.15").
 * lg_money_price_parse reads the text exactly (exponents allowed, as JSON
 * writes them); lg_money_price_from_double accepts a double only when it is
 * exactly the double a JSON parser makes of some 6-decimal text (for
 * parsers, like jansson, that hand out numbers as doubles). Formatting is
 * integer arithmetic.
 */
#ifndef LG_MONEY_H
#define LG_MONEY_H

#include "engine/base/common.h"

/* Prices of one tenant (or the server default), micro-USD per 1M tokens. */
typedef struct lg_pricing {
    int64_t input;        /* prompt tokens not served from the prefix cache */
    int64_t cached_input; /* prompt tokens served from the prefix cache */
    int64_t output;       /* completion tokens */
} lg_pricing;

enum {
    LG_MONEY_PRICE_BUF = 32, /* "9223372036854.775807" + NUL fits */
    LG_MONEY_USD_BUF = 32,   /* "-9223372.036854775808" + NUL fits */
};

/* Parses a price in USD per Mtok: digits, optional '.' and digits, optional
 * exponent (e/E, sign, digits). At most 6 decimals once trailing zeros are
 * dropped ("1.5000000" is fine, "0.0000001" is not). Refuses signs, empty
 * text, whitespace and values past int64 micro-USD, with a one-line message.
 * len is the text's length (the text need not be NUL-terminated). */
int lg_money_price_parse(const char *text, size_t len, int64_t *micro_out, lg_err *err);

/* A JSON number already converted to double: accepted iff v is finite,
 * >= 0, below 2^53 micro-USD and exactly the nearest double to some
 * 6-decimal value (then that value is returned). */
int lg_money_price_from_double(double v, int64_t *micro_out, lg_err *err);

/* 0 when every price of p is >= 0; -1 with a message naming the first
 * negative one otherwise. */
int lg_money_pricing_check(const lg_pricing *p, lg_err *err);

/* 150000 -> "0.15", 2000000 -> "2", 1 -> "0.000001" (shortest exact text;
 * lg_money_price_parse reads it back to the same integer). */
void lg_money_format_price(int64_t micro, char buf[LG_MONEY_PRICE_BUF]);

/* Pico-USD as exact USD with all 12 decimals: 123456789 -> "0.000123456789",
 * 1000000000000 -> "1.000000000000". */
void lg_money_format_usd(int64_t pico, char buf[LG_MONEY_USD_BUF]);

/* The cost of one request (formula above). Refuses negative counts,
 * cached > prompt, negative prices and int64 overflow. */
int lg_money_cost(const lg_pricing *p, int64_t prompt_tokens, int64_t cached_tokens, int64_t completion_tokens,
                  int64_t *pico_out, lg_err *err);

/* *acc += v, refusing int64 overflow (for sums kept in C). */
int lg_money_add(int64_t *acc, int64_t v, lg_err *err);

#endif
