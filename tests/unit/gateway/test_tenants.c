/*
 * test_tenants.c — the tenant view (gateway/tenants.h): lookups by slug and
 * id, effective pricing, objects that outlive their tenant's deletion (a
 * pointer from the resolver stays valid), a name reused by a new tenant
 * being a new object, and listings of live tenants by name.
 */
#include "tests/unit/test.h"

#include "gateway/tenants.h"

static lg_tenant row(int64_t id, const char *name, bool own_price)
{
    lg_tenant t;
    memset(&t, 0, sizeof t);
    t.id = id;
    snprintf(t.name, sizeof t.name, "%s", name);
    t.weight = 1;
    t.limits = (lg_tenant_limits){LG_UNLIMITED, LG_UNLIMITED, LG_UNLIMITED, LG_UNLIMITED};
    if (own_price) {
        t.has_pricing = true;
        t.pricing = (lg_pricing){.input = 7, .cached_input = 3, .output = 9};
    }
    return t;
}

int main(void)
{
    lg_tenants *tv = NULL;
    lg_err err = {{0}};
    CHECK(lg_tenants_create(&tv, &err) == 0);
    lg_pricing def = {.input = 1, .cached_input = 1, .output = 2};
    lg_tenant rows[] = {row(1, "zeta", false), row(2, "acme", true)};
    CHECK(lg_tenants_apply(tv, rows, 2, &def, &err) == 0);

    const lg_tenant_obj *acme = lg_tenants_find(tv, "acme");
    CHECK(acme && acme->id == 2 && !strcmp(acme->name, "acme"));
    CHECK(lg_tenants_by_id(tv, 1) == lg_tenants_find(tv, "zeta"));
    CHECK(!lg_tenants_find(tv, "nosuch") && !lg_tenants_by_id(tv, 99));
    void *t = NULL;
    CHECK(lg_tenants_resolve(tv, "acme", &t) == 1 && t == acme);
    CHECK(lg_tenants_resolve(tv, "nosuch", &t) == 0 && !t);
    lg_tenant r;
    lg_pricing p;
    CHECK(lg_tenants_get(tv, acme, &r, &p) && p.input == 7 && p.output == 9 && r.has_pricing);
    CHECK(lg_tenants_get(tv, lg_tenants_find(tv, "zeta"), NULL, &p) && p.input == 1 && p.output == 2);

    lg_tenant_copy *v = NULL;
    int n = 0;
    CHECK(lg_tenants_list(tv, &v, &n) == 0 && n == 2 && !strcmp(v[0].row.name, "acme") &&
          !strcmp(v[1].row.name, "zeta") && v[1].pricing.input == 1);
    free(v);

    /* acme deleted: its object stays (marked), its name resolves no more */
    lg_tenant only_zeta[] = {row(1, "zeta", false)};
    CHECK(lg_tenants_apply(tv, only_zeta, 1, &def, &err) == 0);
    CHECK(!lg_tenants_find(tv, "acme"));
    CHECK(lg_tenants_by_id(tv, 2) == acme && !strcmp(acme->name, "acme"));
    CHECK(!lg_tenants_get(tv, acme, &r, NULL));
    CHECK(lg_tenants_list(tv, &v, &n) == 0 && n == 1);
    free(v);

    /* a new tenant under the old name is another object */
    lg_tenant again[] = {row(1, "zeta", false), row(3, "acme", false)};
    CHECK(lg_tenants_apply(tv, again, 2, &def, &err) == 0);
    const lg_tenant_obj *acme2 = lg_tenants_find(tv, "acme");
    CHECK(acme2 && acme2 != acme && acme2->id == 3);
    CHECK(!lg_tenants_get(tv, acme, NULL, NULL) && lg_tenants_get(tv, acme2, NULL, NULL));

    /* the default price changes for tenants without their own */
    lg_pricing def2 = {.input = 5, .cached_input = 5, .output = 5};
    CHECK(lg_tenants_apply(tv, again, 2, &def2, &err) == 0);
    CHECK(lg_tenants_get(tv, acme2, NULL, &p) && p.input == 5);

    lg_tenants_free(tv);
    lg_tenants_free(NULL);
    TEST_DONE();
}
