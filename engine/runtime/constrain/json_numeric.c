/*
 * json_numeric.c — JSON Schema number bounds as regular expressions over
 * the JSON number syntax (see compilers.h).
 *
 * What: lg_rx_number_range(integer?, bounds) returns a regex for the JSON
 * number literals whose exact decimal value lies within the bounds.
 *
 * How (the textbook construction, on decimal digit strings so any double
 * bound works, 1e300 included): a bound is split into sign, integer digits
 * and fraction digits (the shortest digits that round-trip the double, so
 * 1.1 is "1" "1", not 1.100000000000000088...). A range of non-negative
 * integers splits by digit count; a range of equal-length digit strings
 * splits on the leading digit: L0 followed by [rest of L, 99..9], the
 * digits strictly between L0 and H0 followed by anything, H0 followed by
 * [00..0, rest of H]. An open upper side is "more digits than the bound".
 * Fractions compare lexicographically once trailing zeros are dropped
 * (0.f >= 0.F: a first digit above F's, or F's first digit and the rest
 * >= the rest of F), which gives ge / le / between on fraction strings.
 * A decimal x in [lo, hi] is then: x's integer part equal to lo's with the
 * fraction >= lo's, strictly between the integer parts with any fraction,
 * or equal to hi's with the fraction <= hi's. Negative numbers are "-"
 * followed by the same construction on the absolute value.
 *
 * Language (documented in constrain.h): integers are -?(0|[1-9][0-9]*);
 * bounded numbers are -?(0|[1-9][0-9]*)(\.[0-9]+)? (no exponent: a bound
 * must be checkable digit by digit); negative zero ("-0", "-0.0") is never
 * produced, except "-0" for integers when both bounds are given and the
 * range holds 0 and negative numbers (as llguidance); trailing zeros in a
 * fraction are allowed wherever the value is
 * in range ("2.50" for minimum 2.5). Unbounded numbers (no bound at all)
 * are not built here: the caller uses the full JSON number syntax.
 *
 * Limits: regex size is O(d^2) for d digits of the bounds (d <= 330 for a
 * double); recursion depth is bounded by d.
 */
#include "engine/runtime/constrain/compilers.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* a non-negative decimal: integer digits (no leading zeros, "0" for zero) and
 * fraction digits (no trailing zeros) */
typedef struct ldec {
    char i[400];
    char f[400];
} ldec;

/* shortest digits that round-trip x (x finite, >= 0): digits d1..dn and exponent e with
 * x = 0.d1..dn * 10^e */
static void lg_shortest(double x, char *digits, int *exp10)
{
    char buf[64];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, x);
        if (strtod(buf, NULL) == x)
            break;
    }
    /* buf: d[.ddd]e[+-]xx */
    int n = 0;
    const char *p = buf;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9')
            digits[n++] = *p;
    digits[n] = 0;
    int e = *p == 'e' ? atoi(p + 1) : 0;
    while (n > 1 && digits[n - 1] == '0')
        digits[--n] = 0;
    *exp10 = e + 1;
}

static void lg_dec_of(double x, ldec *d)
{
    char dg[32];
    int e;
    x = fabs(x);
    if (x == 0) {
        strcpy(d->i, "0");
        d->f[0] = 0;
        return;
    }
    lg_shortest(x, dg, &e);
    int n = (int)strlen(dg), ni = 0, nf = 0;
    if (e <= 0) {
        d->i[ni++] = '0';
        for (int k = 0; k < -e; k++)
            d->f[nf++] = '0';
        for (int k = 0; k < n; k++)
            d->f[nf++] = dg[k];
    } else {
        for (int k = 0; k < e; k++)
            d->i[ni++] = k < n ? dg[k] : '0';
        for (int k = e; k < n; k++)
            d->f[nf++] = dg[k];
    }
    d->i[ni] = 0;
    while (nf > 0 && d->f[nf - 1] == '0')
        nf--;
    d->f[nf] = 0;
}

void lg_num_to_str(double x, char *buf, size_t cap)
{
    if (!isfinite(x)) {
        snprintf(buf, cap, "null");
        return;
    }
    if (x == 0) {
        snprintf(buf, cap, signbit(x) ? "-0.0" : "0.0");
        return;
    }
    char dg[32];
    int e;
    lg_shortest(fabs(x), dg, &e);
    int n = (int)strlen(dg);
    lg_strbuf b = {0};
    if (x < 0)
        lg_strbuf_puts(&b, "-");
    if (e > 0 && e <= 16) {
        for (int k = 0; k < e; k++)
            lg_strbuf_put(&b, k < n ? &dg[k] : "0", 1);
        lg_strbuf_puts(&b, ".");
        if (n > e)
            lg_strbuf_put(&b, dg + e, (size_t)(n - e));
        else
            lg_strbuf_puts(&b, "0");
    } else if (e <= 0 && e > -5) {
        lg_strbuf_puts(&b, "0.");
        for (int k = 0; k < -e; k++)
            lg_strbuf_puts(&b, "0");
        lg_strbuf_put(&b, dg, (size_t)n);
    } else {
        lg_strbuf_put(&b, dg, 1);
        if (n > 1) {
            lg_strbuf_puts(&b, ".");
            lg_strbuf_put(&b, dg + 1, (size_t)(n - 1));
        }
        lg_strbuf_printf(&b, "e%d", e - 1);
    }
    snprintf(buf, cap, "%s", b.p && !b.oom ? b.p : "0");
    free(b.p);
}

/* ---- comparisons and arithmetic on digit strings ------------------------------------- */

static int lg_cmp_int(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la != lb)
        return la < lb ? -1 : 1;
    int c = strcmp(a, b);
    return (c > 0) - (c < 0);
}

static int lg_cmp_dec(const ldec *a, const ldec *b)
{
    int c = lg_cmp_int(a->i, b->i);
    if (c)
        return c;
    c = strcmp(a->f, b->f); /* no trailing zeros: lexicographic is numeric */
    return (c > 0) - (c < 0);
}

/* s += 1 (s has room for one more digit) */
static void lg_inc(char *s)
{
    int n = (int)strlen(s);
    for (int k = n - 1; k >= 0; k--) {
        if (s[k] != '9') {
            s[k]++;
            return;
        }
        s[k] = '0';
    }
    memmove(s + 1, s, (size_t)n + 1);
    s[0] = '1';
}

/* s -= 1 (s > 0) */
static void lg_dec(char *s)
{
    int n = (int)strlen(s);
    for (int k = n - 1; k >= 0; k--) {
        if (s[k] != '0') {
            s[k]--;
            break;
        }
        s[k] = '9';
    }
    if (n > 1 && s[0] == '0')
        memmove(s, s + 1, (size_t)n);
}

/* ---- regex text ------------------------------------------------------------------------- */

static void lg_digit_set(lg_strbuf *b, char lo, char hi)
{
    if (lo == hi)
        lg_strbuf_put(b, &lo, 1);
    else if (lo == '0' && hi == '9')
        lg_strbuf_puts(b, "[0-9]");
    else
        lg_strbuf_printf(b, "[%c-%c]", lo, hi);
}

static bool lg_all(const char *s, size_t n, char c)
{
    for (size_t k = 0; k < n; k++)
        if (s[k] != c)
            return false;
    return true;
}

/* digit strings of exactly n digits s with L <= s <= H (L <= H, both n digits) */
static void lg_same_len(lg_strbuf *b, const char *L, const char *H, size_t n)
{
    size_t k = 0;
    while (k < n && L[k] == H[k])
        lg_strbuf_put(b, &L[k++], 1);
    if (k == n)
        return;
    size_t r = n - k - 1; /* digits after the first differing one */
    char lo = L[k], hi = H[k];
    bool low_full = lg_all(L + k + 1, r, '0'), high_full = lg_all(H + k + 1, r, '9');
    char mlo = low_full ? lo : (char)(lo + 1), mhi = high_full ? hi : (char)(hi - 1);
    int alts = 0;
    lg_strbuf_puts(b, "(?:");
    if (!low_full) {
        char nines[400];
        memset(nines, '9', r);
        lg_strbuf_put(b, &lo, 1);
        lg_same_len(b, L + k + 1, nines, r);
        alts++;
    }
    if (mlo <= mhi) {
        if (alts++)
            lg_strbuf_puts(b, "|");
        lg_digit_set(b, mlo, mhi);
        if (r == 1)
            lg_strbuf_puts(b, "[0-9]");
        else if (r > 1)
            lg_strbuf_printf(b, "[0-9]{%zu}", r);
    }
    if (!high_full) {
        char zeros[400];
        memset(zeros, '0', r);
        if (alts++)
            lg_strbuf_puts(b, "|");
        lg_strbuf_put(b, &hi, 1);
        lg_same_len(b, zeros, H + k + 1, r);
    }
    lg_strbuf_puts(b, ")");
}

/* integers in [lo, hi] (digit strings without leading zeros; hi NULL: no upper
 * bound), as an alternation "(?:...)" */
static void lg_int_range(lg_strbuf *b, const char *lo, const char *hi)
{
    size_t dl = strlen(lo), dh = hi ? strlen(hi) : dl;
    char low[400], high[400];
    int alts = 0;
    lg_strbuf_puts(b, "(?:");
    for (size_t d = dl; d <= dh; d++) {
        if (d == dl)
            memcpy(low, lo, d);
        else {
            low[0] = '1';
            memset(low + 1, '0', d - 1);
        }
        if (hi && d == dh)
            memcpy(high, hi, d);
        else
            memset(high, '9', d);
        if (alts++)
            lg_strbuf_puts(b, "|");
        lg_same_len(b, low, high, d);
    }
    if (!hi)
        lg_strbuf_printf(b, "|[1-9][0-9]{%zu,}", dl);
    lg_strbuf_puts(b, ")");
}

/* A set of fraction digit strings: `rx` the non-empty ones (NULL: none),
 * `empty` whether the absent fraction (value 0) belongs. */
typedef struct lfrac {
    char *rx;
    bool empty;
} lfrac;

static char *lg_take(lg_strbuf *b)
{
    if (b->oom) {
        free(b->p);
        return NULL;
    }
    return b->p ? b->p : strdup("");
}

/* d followed by the set f (which may hold the empty string) */
static void lg_put_digit_then(lg_strbuf *b, char d, const lfrac *f)
{
    if (!f->rx && !f->empty)
        return;
    lg_strbuf_put(b, &d, 1);
    if (f->rx && f->empty)
        lg_strbuf_printf(b, "(?:%s)?", f->rx);
    else if (f->rx)
        lg_strbuf_puts(b, f->rx);
}

static void lg_alt(lg_strbuf *b, int *alts)
{
    lg_strbuf_puts(b, (*alts)++ ? "|" : "(?:");
}

static lfrac lg_close(lg_strbuf *b, int alts, bool empty)
{
    lfrac r = {NULL, empty};
    if (alts) {
        lg_strbuf_puts(b, ")");
        r.rx = lg_take(b);
    } else
        free(b->p);
    return r;
}

/* 0.f >= 0.F (or >, !incl) */
static lfrac lg_frac_ge(const char *F, bool incl)
{
    lg_strbuf b = {0};
    int alts = 0;
    if (!*F) {
        if (incl)
            return (lfrac){strdup("[0-9]+"), true};
        return (lfrac){strdup("[0-9]*[1-9][0-9]*"), false};
    }
    if (F[0] < '9') {
        lg_alt(&b, &alts);
        lg_digit_set(&b, (char)(F[0] + 1), '9');
        lg_strbuf_puts(&b, "[0-9]*");
    }
    lfrac rest = lg_frac_ge(F + 1, incl);
    if (rest.rx || rest.empty) {
        lg_alt(&b, &alts);
        lg_put_digit_then(&b, F[0], &rest);
    }
    free(rest.rx);
    return lg_close(&b, alts, false);
}

/* 0.f <= 0.F (or <, !incl) */
static lfrac lg_frac_le(const char *F, bool incl)
{
    lg_strbuf b = {0};
    int alts = 0;
    if (!*F)
        return incl ? (lfrac){strdup("0+"), true} : (lfrac){NULL, false};
    if (F[0] > '0') {
        lg_alt(&b, &alts);
        lg_digit_set(&b, '0', (char)(F[0] - 1));
        lg_strbuf_puts(&b, "[0-9]*");
    }
    lfrac rest = lg_frac_le(F + 1, incl);
    if (rest.rx || rest.empty) {
        lg_alt(&b, &alts);
        lg_put_digit_then(&b, F[0], &rest);
    }
    free(rest.rx);
    return lg_close(&b, alts, true);
}

/* 0.L <= 0.f <= 0.H (each side inclusive or not), 0.L <= 0.H */
static lfrac lg_frac_between(const char *L, bool li, const char *H, bool hi)
{
    if (!*L && li)
        return lg_frac_le(H, hi);
    if (!*H)
        return (!*L && li && hi) ? (lfrac){strdup("0+"), true} : (lfrac){NULL, false};
    char l = *L ? L[0] : '0', h = H[0];
    const char *lr = *L ? L + 1 : L;
    lg_strbuf b = {0};
    int alts = 0;
    if (l == h) {
        lfrac rest = lg_frac_between(lr, li, H + 1, hi);
        if (rest.rx || rest.empty) {
            lg_alt(&b, &alts);
            lg_put_digit_then(&b, l, &rest);
        }
        free(rest.rx);
    } else {
        lfrac a = lg_frac_ge(lr, li), c = lg_frac_le(H + 1, hi);
        if (a.rx || a.empty) {
            lg_alt(&b, &alts);
            lg_put_digit_then(&b, l, &a);
        }
        if (l + 1 <= h - 1) {
            lg_alt(&b, &alts);
            lg_digit_set(&b, (char)(l + 1), (char)(h - 1));
            lg_strbuf_puts(&b, "[0-9]*");
        }
        if (c.rx || c.empty) {
            lg_alt(&b, &alts);
            lg_put_digit_then(&b, h, &c);
        }
        free(a.rx);
        free(c.rx);
    }
    return lg_close(&b, alts, !*L && li);
}

/* integer part `ip` (a regex) followed by the fraction set f; false if f is empty */
static bool lg_put_with_frac(lg_strbuf *b, const char *ip, lfrac f, int *alts)
{
    if (!f.rx && !f.empty)
        return false;
    lg_alt(b, alts);
    lg_strbuf_puts(b, ip);
    if (f.rx && f.empty)
        lg_strbuf_printf(b, "(?:\\.%s)?", f.rx);
    else if (f.rx)
        lg_strbuf_printf(b, "\\.%s", f.rx);
    free(f.rx);
    return true;
}

/* non-negative decimals x with lo <= x <= hi (hi NULL: unbounded); the flags
 * make a side exclusive. Integer mode: no fraction. Appends an alternation
 * or nothing; returns whether anything was appended. */
static bool lg_nonneg(lg_strbuf *b, const ldec *lo, bool li, const ldec *hi, bool hincl, bool integer)
{
    int alts = 0;
    if (hi) {
        int c = lg_cmp_dec(lo, hi);
        if (c > 0 || (c == 0 && !(li && hincl)))
            return false;
    }
    if (integer) {
        /* bounds are integers here: lo/hi already rounded inwards by the caller */
        lg_int_range(b, lo->i, hi ? hi->i : NULL);
        return true;
    }
    if (hi && !strcmp(lo->i, hi->i)) {
        lg_put_with_frac(b, lo->i, lg_frac_between(lo->f, li, hi->f, hincl), &alts);
    } else {
        lg_put_with_frac(b, lo->i, lg_frac_ge(lo->f, li), &alts);
        char a[402];
        snprintf(a, sizeof a, "%s", lo->i);
        lg_inc(a);
        bool middle = true;
        char z[402] = {0};
        if (hi) {
            snprintf(z, sizeof z, "%s", hi->i);
            if (lg_cmp_int(a, z) >= 0)
                middle = false;
            else
                lg_dec(z);
        }
        if (middle) {
            lg_strbuf tmp = {0};
            lg_int_range(&tmp, a, hi ? z : NULL);
            char *ip = lg_take(&tmp);
            if (ip)
                lg_put_with_frac(b, ip, (lfrac){strdup("[0-9]+"), true}, &alts);
            free(ip);
        }
        if (hi)
            lg_put_with_frac(b, hi->i, lg_frac_le(hi->f, hincl), &alts);
    }
    if (alts)
        lg_strbuf_puts(b, ")");
    return alts > 0;
}

/* rounds an integer bound inwards: ceil for a lower bound, floor for an upper
 * one, and steps past it when exclusive and integral */
static void lg_round_int(ldec *d, bool neg, bool lower, bool excl)
{
    bool frac = d->f[0] != 0;
    d->f[0] = 0;
    /* the magnitude moves up when (lower && !neg) || (!lower && neg) */
    bool up = lower != neg;
    if (frac) {
        if (up)
            lg_inc(d->i);
    } else if (excl) {
        if (up)
            lg_inc(d->i);
        else if (strcmp(d->i, "0"))
            lg_dec(d->i);
        else {
            /* stepping below zero in magnitude: the caller handles 0 */
            strcpy(d->i, "-");
        }
    }
}

char *lg_rx_number_range(bool integer, bool has_lo, double lo, bool lo_excl, bool has_hi, double hi,
                         bool hi_excl, const char **why)
{
    *why = NULL;
    if ((has_lo && !isfinite(lo)) || (has_hi && !isfinite(hi))) {
        *why = "a bound is not a finite number";
        return NULL;
    }
    /* The value set splits into x < 0 ("-" then |x| in a range of positive
     * magnitudes) and x >= 0. */
    ldec L = {0}, H = {0};
    bool lneg = has_lo && lo < 0, hneg = has_hi && hi < 0;
    if (has_lo)
        lg_dec_of(lo, &L);
    if (has_hi)
        lg_dec_of(hi, &H);
    bool li = !lo_excl, hincl = !hi_excl;
    if (integer) {
        /* integer bounds: round inwards, then every bound is inclusive */
        if (has_lo) {
            lg_round_int(&L, lneg, true, lo_excl);
            if (!strcmp(L.i, "-")) { /* lo was 0 exclusive, magnitude step down */
                strcpy(L.i, "1");
                lneg = false;
            }
            if (lneg && !strcmp(L.i, "0"))
                lneg = false;
        }
        if (has_hi) {
            lg_round_int(&H, hneg, false, hi_excl);
            if (!strcmp(H.i, "-")) { /* hi was 0 exclusive */
                strcpy(H.i, "1");
                hneg = true;
            }
            if (hneg && !strcmp(H.i, "0"))
                hneg = false;
        }
        li = hincl = true;
    }
    lg_strbuf b = {0};
    int parts = 0;
    lg_strbuf_puts(&b, "(?:");
    /* negative part: magnitudes in [max(|hi|, 0+), |lo|] */
    if (!has_lo || lneg) {
        ldec mlo = {0};
        bool mlo_incl;
        if (has_hi && hneg) {
            mlo = H;
            mlo_incl = hincl;
        } else {
            strcpy(mlo.i, integer ? "1" : "0");
            mlo_incl = integer; /* magnitude > 0: no negative zero */
        }
        lg_strbuf tmp = {0};
        if (lg_nonneg(&tmp, &mlo, mlo_incl, has_lo ? &L : NULL, li, integer)) {
            char *s = lg_take(&tmp);
            if (!s)
                goto oom;
            lg_strbuf_printf(&b, "%s-%s", parts++ ? "|" : "", s);
            free(s);
        } else
            free(tmp.p);
    }
    /* non-negative part: [max(lo, 0), hi] */
    if (!has_hi || !hneg) {
        ldec plo = {0};
        bool plo_incl;
        if (has_lo && !lneg) {
            plo = L;
            plo_incl = li;
        } else {
            strcpy(plo.i, "0");
            plo_incl = true;
        }
        lg_strbuf tmp = {0};
        if (lg_nonneg(&tmp, &plo, plo_incl, has_hi ? &H : NULL, hincl, integer)) {
            char *s = lg_take(&tmp);
            if (!s)
                goto oom;
            lg_strbuf_printf(&b, "%s%s", parts++ ? "|" : "", s);
            free(s);
        } else
            free(tmp.p);
    }
    /* "-0" (value 0) where llguidance's integer ranges have it: both bounds
     * given, negatives and zero inside */
    if (integer && has_lo && has_hi && lneg && !hneg)
        lg_strbuf_printf(&b, "%s-0", parts++ ? "|" : "");
    lg_strbuf_puts(&b, ")");
    if (!parts) {
        free(b.p);
        *why = "no number satisfies the bounds";
        return NULL;
    }
    char *r = lg_take(&b);
    if (!r)
        *why = "out of memory";
    return r;
oom:
    free(b.p);
    *why = "out of memory";
    return NULL;
}
