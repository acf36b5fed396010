/*
 * tls.c — see tls.h.
 */
#include "gateway/http/tls.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define H2O_USE_LIBUV 0
#include <h2o.h>

static const char *ossl_err(void)
{
    static __thread char buf[256];
    unsigned long e = ERR_get_error();
    if (!e)
        return "no OpenSSL error";
    ERR_error_string_n(e, buf, sizeof buf);
    ERR_clear_error();
    return buf;
}

static const h2o_iovec_t alpn_protocols[] = {{H2O_STRLIT("h2")}, {H2O_STRLIT("http/1.1")}, {NULL, 0}};

SSL_CTX *lg_tls_server_ctx(const char *cert_path, const char *key_path, lg_err *err)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (!ctx) {
        lg_fail(err, "SSL_CTX_new: %s", ossl_err());
        return NULL;
    }
    if (!SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) || !SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION) ||
        !SSL_CTX_set_cipher_list(ctx, LG_TLS12_CIPHERS) || !SSL_CTX_set1_groups_list(ctx, "X25519:P-256:P-384") ||
        !SSL_CTX_set_dh_auto(ctx, 1)) {
        lg_fail(err, "configuring TLS: %s", ossl_err());
        SSL_CTX_free(ctx);
        return NULL;
    }
    SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
    SSL_CTX_clear_options(ctx, SSL_OP_CIPHER_SERVER_PREFERENCE);
    if (SSL_CTX_use_certificate_chain_file(ctx, cert_path) != 1) {
        lg_fail(err, "TLS certificate %s: %s", cert_path, ossl_err());
        SSL_CTX_free(ctx);
        return NULL;
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, key_path, SSL_FILETYPE_PEM) != 1) {
        lg_fail(err, "TLS key %s: %s", key_path, ossl_err());
        SSL_CTX_free(ctx);
        return NULL;
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
        lg_fail(err, "TLS key %s does not match certificate %s", key_path, cert_path);
        SSL_CTX_free(ctx);
        return NULL;
    }
    h2o_ssl_register_alpn_protocols(ctx, alpn_protocols);
    return ctx;
}

static int add_ext(X509 *x, int nid, const char *value)
{
    X509V3_CTX v3;
    X509V3_set_ctx_nodb(&v3);
    X509V3_set_ctx(&v3, x, x, NULL, NULL, 0);
    X509_EXTENSION *ext = X509V3_EXT_conf_nid(NULL, &v3, nid, value);
    if (!ext)
        return -1;
    int ok = X509_add_ext(x, ext, -1);
    X509_EXTENSION_free(ext);
    return ok ? 0 : -1;
}

/* Writes via a temporary file renamed into place. */
static int write_pem(const char *path, mode_t mode, EVP_PKEY *key, X509 *cert, lg_err *err)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    unlink(tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd < 0)
        return lg_fail(err, "cannot create %s: %s", tmp, strerror(errno));
    FILE *f = fdopen(fd, "w");
    if (!f) {
        close(fd);
        return lg_fail(err, "fdopen %s: %s", tmp, strerror(errno));
    }
    int ok = key ? PEM_write_PrivateKey(f, key, NULL, NULL, 0, NULL, NULL) : PEM_write_X509(f, cert);
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    if (fclose(f) != 0)
        ok = 0;
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return lg_fail(err, "cannot write %s: %s", path, strerror(errno));
    }
    return 0;
}

static int generate(const char *cert_path, const char *key_path, lg_err *err)
{
    int rc = -1;
    EVP_PKEY *key = EVP_EC_gen("P-256");
    X509 *x = X509_new();
    BIGNUM *serial = BN_new();
    if (!key || !x || !serial) {
        lg_fail(err, "generating the TLS key: %s", ossl_err());
        goto out;
    }
    if (!BN_rand(serial, 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) || !BN_to_ASN1_INTEGER(serial, X509_get_serialNumber(x)) ||
        !X509_set_version(x, 2) || !X509_gmtime_adj(X509_getm_notBefore(x), -3600) ||
        !X509_gmtime_adj(X509_getm_notAfter(x), 365L * 24 * 3600) || !X509_set_pubkey(x, key)) {
        lg_fail(err, "building the certificate: %s", ossl_err());
        goto out;
    }
    X509_NAME *name = X509_get_subject_name(x);
    if (!X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, (const unsigned char *)"loragate (self-signed)", -1, -1, 0) ||
        !X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)"localhost", -1, -1, 0) ||
        !X509_set_issuer_name(x, name)) {
        lg_fail(err, "certificate name: %s", ossl_err());
        goto out;
    }
    if (add_ext(x, NID_subject_alt_name, "DNS:localhost,IP:127.0.0.1,IP:::1") ||
        add_ext(x, NID_basic_constraints, "critical,CA:FALSE") ||
        add_ext(x, NID_key_usage, "critical,digitalSignature") || add_ext(x, NID_ext_key_usage, "serverAuth") ||
        add_ext(x, NID_subject_key_identifier, "hash")) {
        lg_fail(err, "certificate extensions: %s", ossl_err());
        goto out;
    }
    if (!X509_sign(x, key, EVP_sha256())) {
        lg_fail(err, "signing the certificate: %s", ossl_err());
        goto out;
    }
    if (write_pem(key_path, 0600, key, NULL, err) || write_pem(cert_path, 0644, NULL, x, err))
        goto out;
    rc = 0;
out:
    BN_free(serial);
    X509_free(x);
    EVP_PKEY_free(key);
    return rc;
}

int lg_tls_self_signed(const char *data_dir, char **cert_path, char **key_path, bool *created, lg_err *err)
{
    *cert_path = *key_path = NULL;
    *created = false;
    char dir[4096];
    if (snprintf(dir, sizeof dir, "%s/tls", data_dir) >= (int)sizeof dir - 16)
        return lg_fail(err, "data dir path too long");
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return lg_fail(err, "cannot create %s: %s", dir, strerror(errno));
    char *c = malloc(strlen(dir) + 10), *k = malloc(strlen(dir) + 10);
    if (!c || !k) {
        free(c);
        free(k);
        return lg_fail(err, "out of memory");
    }
    sprintf(c, "%s/cert.pem", dir);
    sprintf(k, "%s/key.pem", dir);
    struct stat sc, sk;
    bool hc = stat(c, &sc) == 0, hk = stat(k, &sk) == 0;
    if (hc != hk) {
        lg_fail(err, "%s exists without %s: remove it to generate a new pair", hc ? c : k, hc ? k : c);
        goto fail;
    }
    if (hk && (sk.st_mode & 077)) {
        lg_fail(err, "TLS key %s is readable by group or others (mode %03o): chmod 600 it", k, sk.st_mode & 0777);
        goto fail;
    }
    if (!hc) {
        if (generate(c, k, err) != 0)
            goto fail;
        *created = true;
    }
    *cert_path = c;
    *key_path = k;
    return 0;
fail:
    free(c);
    free(k);
    return -1;
}
