/*
 * money.c — exact price parsing, cost and formatting (see money.h).
 *
 * Parsing works on the decimal digits themselves: a price is a digit
 * string D and a power of ten, value = D * 10^e USD per Mtok, so in micro-USD
 * it is D * 10^(e + 6). Trailing zeros of D are folded into the exponent;
 * what is left must have a non-negative exponent (else: more than 6
 * decimals) and fit int64. No double is involved unless the caller hands
 * one in (lg_money_price_from_double, which checks exactness).
 */
#include "db/money.h"

#include <math.h>
#include <stdio.h>

#define LG_PRICE_TEXT_MAX 256

static bool lg_digit(char c) { return c >= '0' && c <= '9'; }

int lg_money_price_parse(const char *text, size_t len, int64_t *micro_out, lg_err *err)
{
    const int show = len > 40 ? 40 : (int)len;
    if (!text || len == 0)
        return lg_fail(err, "invalid price: empty (expected USD per million tokens, like \"0.15\")");
    if (len > LG_PRICE_TEXT_MAX)
        return lg_fail(err, "invalid price '%.*s...': text too long", show, text);
    if (text[0] == '-')
        return lg_fail(err, "invalid price '%.*s': prices cannot be negative", show, text);

    char digits[LG_PRICE_TEXT_MAX];
    size_t nd = 0, i = 0;
    int64_t frac = 0, exp = 0;
    while (i < len && lg_digit(text[i]))
        digits[nd++] = text[i++];
    if (nd == 0)
        return lg_fail(err, "invalid price '%.*s': expected a decimal number like 0.15", show, text);
    if (i < len && text[i] == '.') {
        i++;
        size_t start = i;
        while (i < len && lg_digit(text[i]))
            digits[nd++] = text[i++];
        if (i == start)
            return lg_fail(err, "invalid price '%.*s': expected digits after '.'", show, text);
        frac = (int64_t)(i - start);
    }
    if (i < len && (text[i] == 'e' || text[i] == 'E')) {
        i++;
        bool neg = false;
        if (i < len && (text[i] == '+' || text[i] == '-'))
            neg = text[i++] == '-';
        size_t start = i;
        while (i < len && lg_digit(text[i])) {
            if (exp < 100000) /* beyond this the value is 0 or overflows anyway */
                exp = exp * 10 + (text[i] - '0');
            i++;
        }
        if (i == start)
            return lg_fail(err, "invalid price '%.*s': expected digits in the exponent", show, text);
        if (neg)
            exp = -exp;
    }
    if (i != len)
        return lg_fail(err, "invalid price '%.*s': unexpected character '%c'", show, text, text[i]);

    /* value = digits * 10^scale micro-USD */
    int64_t scale = exp - frac + 6;
    size_t lead = 0;
    while (lead < nd && digits[lead] == '0')
        lead++;
    while (nd > lead && digits[nd - 1] == '0' && scale < 0) {
        nd--;
        scale++;
    }
    if (nd == lead) {
        *micro_out = 0;
        return 0;
    }
    if (scale < 0)
        return lg_fail(err, "invalid price '%.*s': more than 6 decimals (prices are kept in micro-USD per million "
                            "tokens)",
                       show, text);
    uint64_t v = 0;
    for (size_t k = lead; k < nd; k++) {
        uint64_t d = (uint64_t)(digits[k] - '0');
        if (v > ((uint64_t)INT64_MAX - d) / 10)
            goto overflow;
        v = v * 10 + d;
    }
    for (int64_t k = 0; k < scale; k++) {
        if (v > (uint64_t)INT64_MAX / 10)
            goto overflow;
        v *= 10;
    }
    *micro_out = (int64_t)v;
    return 0;
overflow:
    return lg_fail(err, "invalid price '%.*s': too large (at most 9223372036854.775807 USD per million tokens)", show,
                   text);
}

int lg_money_price_from_double(double v, int64_t *micro_out, lg_err *err)
{
    if (!isfinite(v))
        return lg_fail(err, "invalid price: not a finite number");
    if (v < 0)
        return lg_fail(err, "invalid price %.17g: prices cannot be negative", v);
    double x = v * 1e6;
    if (x >= 9007199254740992.0) /* 2^53: beyond it doubles skip integers */
        return lg_fail(err, "invalid price %.17g: too large for a JSON number; send it as a string", v);
    long long c = llround(x);
    if ((double)c / 1e6 != v)
        return lg_fail(err, "invalid price %.17g: more than 6 decimals (prices are kept in micro-USD per million "
                            "tokens)",
                       v);
    *micro_out = c;
    return 0;
}

int lg_money_pricing_check(const lg_pricing *p, lg_err *err)
{
    if (!p)
        return lg_fail(err, "expected a pricing");
    if (p->input < 0 || p->cached_input < 0 || p->output < 0)
        return lg_fail(err, "prices cannot be negative (input %lld, cached input %lld, output %lld micro-USD/Mtok)",
                       (long long)p->input, (long long)p->cached_input, (long long)p->output);
    return 0;
}

/* |v| as unsigned, INT64_MIN included */
static uint64_t lg_abs_u64(int64_t v) { return v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v; }

void lg_money_format_price(int64_t micro, char buf[LG_MONEY_PRICE_BUF])
{
    uint64_t a = lg_abs_u64(micro);
    uint64_t whole = a / 1000000, frac = a % 1000000;
    const char *sign = micro < 0 ? "-" : "";
    if (frac == 0) {
        snprintf(buf, LG_MONEY_PRICE_BUF, "%s%llu", sign, (unsigned long long)whole);
        return;
    }
    char f[8];
    snprintf(f, sizeof f, "%06llu", (unsigned long long)frac);
    for (int k = 5; k > 0 && f[k] == '0'; k--)
        f[k] = '\0';
    snprintf(buf, LG_MONEY_PRICE_BUF, "%s%llu.%s", sign, (unsigned long long)whole, f);
}

void lg_money_format_usd(int64_t pico, char buf[LG_MONEY_USD_BUF])
{
    uint64_t a = lg_abs_u64(pico);
    snprintf(buf, LG_MONEY_USD_BUF, "%s%llu.%012llu", pico < 0 ? "-" : "", (unsigned long long)(a / 1000000000000ull),
             (unsigned long long)(a % 1000000000000ull));
}

int lg_money_cost(const lg_pricing *p, int64_t prompt_tokens, int64_t cached_tokens, int64_t completion_tokens,
                  int64_t *pico_out, lg_err *err)
{
    if (lg_money_pricing_check(p, err))
        return -1;
    if (prompt_tokens < 0 || cached_tokens < 0 || completion_tokens < 0)
        return lg_fail(err, "token counts cannot be negative (prompt %lld, cached %lld, completion %lld)",
                       (long long)prompt_tokens, (long long)cached_tokens, (long long)completion_tokens);
    if (cached_tokens > prompt_tokens)
        return lg_fail(err, "cached tokens (%lld) exceed prompt tokens (%lld)", (long long)cached_tokens,
                       (long long)prompt_tokens);
    int64_t a, b, c, sum;
    if (__builtin_mul_overflow(prompt_tokens - cached_tokens, p->input, &a) ||
        __builtin_mul_overflow(cached_tokens, p->cached_input, &b) ||
        __builtin_mul_overflow(completion_tokens, p->output, &c) || __builtin_add_overflow(a, b, &sum) ||
        __builtin_add_overflow(sum, c, &sum))
        return lg_fail(err, "request cost overflows int64 pico-USD (prompt %lld, cached %lld, completion %lld tokens)",
                       (long long)prompt_tokens, (long long)cached_tokens, (long long)completion_tokens);
    *pico_out = sum;
    return 0;
}

int lg_money_add(int64_t *acc, int64_t v, lg_err *err)
{
    int64_t r;
    if (__builtin_add_overflow(*acc, v, &r))
        return lg_fail(err, "sum overflows int64 (%lld + %lld)", (long long)*acc, (long long)v);
    *acc = r;
    return 0;
}
