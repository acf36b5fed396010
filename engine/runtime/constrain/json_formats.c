/*
 * json_formats.c — JSON Schema string formats as regular expressions over
 * the decoded string (see compilers.h). Quoting is applied afterwards.
 *
 * Written from the specifications, with the choices llguidance makes so
 * that a format means the same language in both (checked by the tests):
 *   date       RFC 3339 full-date; days per month checked, February has
 *              1-29 whatever the year (leap years are not regular)
 *   time       RFC 3339 full-time: hh:mm:ss (second 60 allowed), optional
 *              fraction, a required offset (Z, z or +hh:mm / -hh:mm)
 *   date-time  date, "T" or "t", time
 *   duration   RFC 3339 appendix A (ISO 8601): P then date and/or T time
 *              parts in order, or weeks
 *   email      RFC 5321 Mailbox, dot-string local part, a domain of
 *              hostname labels or an [IPv4] literal
 *   hostname   RFC 1123 labels of 1-63 letters, digits and inner hyphens
 *   ipv4       dotted quad, each part 0-255 without leading zeros
 *   ipv6       RFC 4291 text forms without an embedded IPv4 tail
 *   uuid       RFC 4122 8-4-4-4-12 hex digits, either case
 *   uri        RFC 3986 URI (scheme, hier-part, query, fragment); IP
 *              literals in brackets use the ipv6 form above or IPvFuture
 * Other formats are refused by the compiler as unsupported.
 */
#include "engine/runtime/constrain/compilers.h"

#define LG_OCTET "(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])"
#define LG_IPV4 LG_OCTET "\\." LG_OCTET "\\." LG_OCTET "\\." LG_OCTET
#define LG_LABEL "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
#define LG_DATE                                                                 \
    "[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])"                 \
    "|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|[12][0-9]))"
#define LG_TIME                                                                 \
    "(?:[01][0-9]|2[0-3]):[0-5][0-9]:(?:[0-5][0-9]|60)(?:\\.[0-9]+)?"           \
    "(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
#define LG_H16 "[0-9A-Fa-f]{1,4}"
#define LG_DUR_TIME "T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S)"
#define LG_ATEXT "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]"
/* RFC 3986 pieces */
#define LG_PCT "%[0-9A-Fa-f]{2}"
#define LG_UNRES_SUB "-A-Za-z0-9._~!$&'()*+,;="
#define LG_PCHAR "(?:[" LG_UNRES_SUB ":@]|" LG_PCT ")"
#define LG_IPV6                                                                 \
    "(?:(?:" LG_H16 ":){7}" LG_H16                                              \
    "|::(?:" LG_H16 ":){0,5}" LG_H16 ":" LG_H16                                 \
    "|" LG_H16 "::(?:" LG_H16 ":){0,4}" LG_H16 ":" LG_H16                       \
    "|(?:" LG_H16 ":){1}" LG_H16 "::(?:" LG_H16 ":){0,3}" LG_H16 ":" LG_H16     \
    "|(?:" LG_H16 ":){2}" LG_H16 "::(?:" LG_H16 ":){0,2}" LG_H16 ":" LG_H16     \
    "|(?:" LG_H16 ":){3}" LG_H16 "::(?:" LG_H16 ":){0,1}" LG_H16 ":" LG_H16     \
    "|(?:" LG_H16 ":){4}" LG_H16 "::" LG_H16 ":" LG_H16                         \
    "|(?:(?:" LG_H16 ":){0,5}" LG_H16 ")?::" LG_H16                             \
    "|(?:(?:" LG_H16 ":){0,6}" LG_H16 ")?::)"

static const struct {
    const char *name;
    const char *rx;
} LG_FORMATS[] = {
    {"date", LG_DATE},
    {"time", LG_TIME},
    {"date-time", LG_DATE "[Tt]" LG_TIME},
    {"duration",
     "P(?:(?:[0-9]+Y(?:[0-9]+M(?:[0-9]+D)?)?|[0-9]+M(?:[0-9]+D)?|[0-9]+D)(?:" LG_DUR_TIME ")?"
     "|" LG_DUR_TIME "|[0-9]+W)"},
    {"email", LG_ATEXT "+(?:\\." LG_ATEXT "+)*@(?:"
              "[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*"
              "|\\[" LG_IPV4 "\\])"},
    {"hostname", LG_LABEL "(?:\\." LG_LABEL ")*"},
    {"ipv4", LG_IPV4},
    {"ipv6", LG_IPV6},
    {"uuid", "[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}"},
    {"uri",
     "[A-Za-z][A-Za-z0-9+.-]*:"
     "(?://(?:(?:[" LG_UNRES_SUB ":]|" LG_PCT ")*@)?"
     "(?:\\[(?:" LG_IPV6 "|v[0-9A-Fa-f]+\\.[" LG_UNRES_SUB ":]+)\\]|(?:[" LG_UNRES_SUB "]|" LG_PCT ")*)"
     "(?::[0-9]*)?(?:/" LG_PCHAR "*)*"
     "|/(?:" LG_PCHAR "+(?:/" LG_PCHAR "*)*)?"
     "|" LG_PCHAR "+(?:/" LG_PCHAR "*)*"
     "|)"
     "(?:\\?(?:" LG_PCHAR "|[/?])*)?(?:#(?:" LG_PCHAR "|[/?])*)?"},
};

const char *lg_json_format_regex(const char *name)
{
    for (size_t i = 0; i < sizeof LG_FORMATS / sizeof LG_FORMATS[0]; i++)
        if (!strcmp(LG_FORMATS[i].name, name))
            return LG_FORMATS[i].rx;
    return NULL;
}
