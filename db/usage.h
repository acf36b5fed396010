/*
 * usage.h — usage queries over the ledger (db/ledger.h), shaped like
 * OpenAI's usage API; the gateway formats the C structs as JSON or CSV.
 *
 * Every figure is a SUM (or COUNT) over usage records, computed by SQLite
 * in int64; a sum past int64 is an error (LG_STORE_ERROR), never a wrapped
 * number. A record belongs to the bucket of its received_at. Every record
 * counts, whatever its status (failed requests have zero tokens and cost
 * unless they produced some).
 *
 * Run queries on a reader (lg_store_open_reader): in WAL mode they see a
 * consistent snapshot and never block the ledger writer. A query reads
 * every record of its range (an index range scan: about a million records
 * a second), so run it on a worker thread, not on an event loop; for a
 * per-request budget check keep counters in memory, seeded once from
 * lg_store_usage_totals.
 *
 * Per-day totals per tenant (a usage page's chart) are lg_store_usage_query
 * with bucket_width LG_USAGE_1D and group_by LG_USAGE_GROUP_TENANT.
 */
#ifndef LG_USAGE_H
#define LG_USAGE_H

#include "engine/base/common.h"
#include "db/ledger.h"
#include "db/store.h"

enum {
    LG_USAGE_1H = 3600,
    LG_USAGE_1D = 86400,
    LG_USAGE_MAX_BUCKETS = 10000, /* a query spanning more buckets is refused */
};

enum {
    LG_USAGE_GROUP_MODEL = 1,
    LG_USAGE_GROUP_API_KEY = 2,
    LG_USAGE_GROUP_TENANT = 4,
};

typedef struct lg_usage_query {
    int64_t start_time;   /* Unix seconds, inclusive, >= 0 */
    int64_t end_time;     /* Unix seconds, exclusive, > start_time */
    int64_t bucket_width; /* LG_USAGE_1H or LG_USAGE_1D */
    int64_t tenant_id;    /* 0: all tenants (and unauthenticated requests) */
    unsigned group_by;    /* any OR of LG_USAGE_GROUP_* */
} lg_usage_query;

/* One result of a bucket: one group (all records of the bucket when
 * group_by is 0). Fields of dimensions not grouped by are ""/0. */
typedef struct lg_usage_result {
    char model[LG_LEDGER_MODEL_MAX];          /* LG_USAGE_GROUP_MODEL */
    char api_key_id[LG_KEY_ID_LEN + 1];       /* LG_USAGE_GROUP_API_KEY ("" : none) */
    int64_t tenant_id;                        /* LG_USAGE_GROUP_TENANT (0: none) */
    char tenant_name[LG_STORE_NAME_MAX];      /* LG_USAGE_GROUP_TENANT */
    int64_t input_tokens;                     /* prompt tokens including cached (OpenAI's count) */
    int64_t input_cached_tokens;
    int64_t output_tokens;
    int64_t num_model_requests;
    int64_t cost_pico;
} lg_usage_result;

/* [start_time, end_time): UTC-aligned (a multiple of the width since the
 * epoch). Buckets of a report cover the query range without gaps, empty
 * ones included (n_results 0); the first and last may extend beyond the
 * range, but only records inside the range count. */
typedef struct lg_usage_bucket {
    int64_t start_time, end_time;
    int n_results;
    lg_usage_result *results; /* ordered by the grouped fields */
} lg_usage_bucket;

typedef struct lg_usage_report {
    unsigned group_by; /* the query's: which result fields are dimensions */
    int n_buckets;
    lg_usage_bucket *buckets;
} lg_usage_report;

/* "1h" or "1d" -> seconds. */
int lg_store_usage_bucket_width(const char *text, int64_t *width, lg_err *err);

int lg_store_usage_query(lg_store *st, const lg_usage_query *q, lg_usage_report **out, lg_err *err);
void lg_usage_report_free(lg_usage_report *r); /* NULL: no-op */

/* The report as CSV (GET /v1/usage?format=csv): a header line, then one
 * line per result, buckets in order (empty buckets have no line):
 *
 *   start_time,end_time[,model][,api_key_id][,tenant_id,tenant],input_tokens,
 *   input_cached_tokens,output_tokens,num_model_requests,cost_usd
 *
 * with a column per dimension of r->group_by. Times are Unix seconds;
 * cost_usd is exact (lg_money_format_usd: 12 decimals). Lines end with CRLF
 * (RFC 4180); a text field with a comma, quote, CR or LF is quoted, and one
 * that starts with = + - @ TAB or CR gets a leading ' so that spreadsheets
 * never run it as a formula (model names come from clients).
 * *out is malloc'd and NUL-terminated, *len its length without the NUL; the
 * caller frees it. */
int lg_usage_report_csv(const lg_usage_report *r, char **out, size_t *len, lg_err *err);

/* Totals of one tenant (0: everything) over [start_time, end_time), e.g.
 * the tokens of the current month for a budget check. Only the count and
 * sum fields of out are set. */
int lg_store_usage_totals(lg_store *st, int64_t tenant_id, int64_t start_time, int64_t end_time,
                          lg_usage_result *out, lg_err *err);

/* Adapters of a tenant (0: all tenants) by tokens (input + output) over
 * [start_time, end_time), largest first, at most `limit`. One row per
 * (tenant, adapter): the base model is a row with adapter_name "" for each
 * tenant that used it, and tenants' adapters of the same name are rows of
 * their own, so a view of all tenants must show each row's tenant_name
 * (and, as names of deleted tenants can be reused, tell deleted tenants
 * apart by tenant_id). Ties are ordered by tenant_id, then adapter_name. */
typedef struct lg_usage_adapter {
    int64_t tenant_id;                    /* 0: requests that never authenticated */
    char tenant_name[LG_STORE_NAME_MAX];  /* the tenant's name, also when deleted; "" for tenant_id 0 */
    char adapter_name[LG_STORE_NAME_MAX]; /* "": the base model */
    int64_t input_tokens, input_cached_tokens, output_tokens, num_model_requests, cost_pico;
} lg_usage_adapter;
int lg_store_usage_top_adapters(lg_store *st, int64_t tenant_id, int64_t start_time, int64_t end_time, int limit,
                                lg_usage_adapter **out, int *n, lg_err *err);

#endif
