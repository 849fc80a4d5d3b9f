/* Several publishers per slot, seen from the receiver: every publisher of
 * every slot is read from the directory once per pull and ordered by name,
 * one is chosen per slot (rotated by the receiver's salt, so receivers
 * spread over the replicas; by name, not by who published first, so the
 * same publishers give the same choice every version and the plan cache
 * holds), and when reading from a chosen publisher fails the receiver
 * chooses another publisher of that slot and transfers again, until the
 * slot runs out of publishers; before declaring it exhausted it reads the
 * slot from the directory again, for a replica that published after the
 * pull began. Later pulls choose a failed publisher last while it
 * publishes the table it failed with. A failed peer is recognised by the
 * name the receiver gave it ("<agent>, slot <S>"), which every transport
 * and connect error carries. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/diag.h"
#include "refit/replicas.h"
#include "reshard/digest.h"

void rs__replicas_reset(rs__replicas_t *set)
{
    for (int64_t s = 0; set->slots != NULL && s < set->nslots; s++) {
        rs__replica_slot_t *sl = &set->slots[s];
        free(sl->tries);
        free(sl->splits);
        rs_dir_entries_free(sl->entries, sl->count);
    }
    free(set->slots);
    set->slots = NULL;
    set->nslots = 0;
    set->loaded = 0;
    set->failovers = 0;
    set->rereads = 0;
    set->bytes = 0;
    set->record[0] = '\0';
    set->dir = NULL;
    set->model = NULL;
}

static int suspect(const rs__replicas_t *set, int64_t slot,
                   const rs_dir_entry_t *e)
{
    for (size_t i = 0; i < set->nsuspects; i++) {
        const rs__suspect_t *x = &set->suspects[i];
        if (x->slot == slot && strcmp(x->publisher, e->publisher) == 0 &&
            x->table_digest == rs_digest(e->table, e->len))
            return 1;
    }
    return 0;
}

static void add_suspect(rs__replicas_t *set, int64_t slot,
                        const rs_dir_entry_t *e)
{
    if (suspect(set, slot, e))
        return;
    rs__suspect_t *x = &set->suspects[set->next_suspect];
    x->slot = slot;
    snprintf(x->publisher, sizeof(x->publisher), "%s", e->publisher);
    x->table_digest = rs_digest(e->table, e->len);
    set->next_suspect = (set->next_suspect + 1) % RS_REPLICAS_SUSPECTS_MAX;
    if (set->nsuspects < RS_REPLICAS_SUSPECTS_MAX)
        set->nsuspects++;
}

static int fresh(const rs__replicas_t *set, const rs_dir_entry_t *e)
{
    return set->stale_s <= 0 || (e->age_s >= 0 && e->age_s < set->stale_s);
}

/* Whether entry i may be chosen in pass `pass`: live and unsuspected,
 * then any unsuspected, then any; never one that failed in this pull. */
static int eligible(const rs__replicas_t *set, int64_t slot, size_t i,
                    int pass)
{
    const rs__replica_slot_t *sl = &set->slots[slot];
    const rs_dir_entry_t *e = &sl->entries[i];
    if (sl->tries[i].failed)
        return 0;
    if (pass == 2)
        return 1;
    int ok = set->nsuspects == 0 || !suspect(set, slot, e);
    return pass == 1 ? ok : ok && fresh(set, e);
}

/* The first eligible entry from the slot's rotation start, in the first
 * pass that has one; 0 when every entry failed. */
static int pick(const rs__replicas_t *set, int64_t slot, size_t *chosen_p)
{
    const rs__replica_slot_t *sl = &set->slots[slot];
    size_t start = (size_t)((set->salt + (uint64_t)slot) % sl->count);
    for (int pass = 0; pass < 3; pass++) {
        for (size_t k = 0; k < sl->count; k++) {
            size_t i = (start + k) % sl->count;
            if (eligible(set, slot, i, pass)) {
                *chosen_p = i;
                return 1;
            }
        }
    }
    return 0;
}

/* One publisher of a slot while it is ordered. */
typedef struct named {
    rs_dir_entry_t e;
    rs__dir_split_t sp;
} named_t;

static int by_name(const void *a, const void *b)
{
    return strcmp(((const named_t *)a)->e.publisher,
                  ((const named_t *)b)->e.publisher);
}

/* Orders the slot's publishers by name: the directory lists them in the
 * order they joined, which changes from version to version. */
static rs_status_t order_slot(rs__replica_slot_t *sl, rs_diag_t *diag)
{
    named_t *v = malloc((sl->count + 1) * sizeof(*v));
    if (v == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    for (size_t i = 0; i < sl->count; i++)
        v[i] = (named_t){sl->entries[i], sl->splits[i]};
    qsort(v, sl->count, sizeof(*v), by_name);
    for (size_t i = 0; i < sl->count; i++) {
        sl->entries[i] = v[i].e;
        sl->splits[i] = v[i].sp;
    }
    free(v);
    return RS_OK;
}

static rs_status_t load_slot(rs__replicas_t *set, rs_dir_h dir,
                             const char *model, int64_t slot, rs_diag_t *diag)
{
    rs__replica_slot_t *sl = &set->slots[slot];
    rs_status_t st = rs__dir_read_parts(dir, model, set->version, slot, diag,
                                        &sl->entries, &sl->splits,
                                        &sl->count);
    if (st == RS_OK)
        st = order_slot(sl, diag);
    if (st != RS_OK)
        return st;
    for (size_t i = 0; i < sl->count; i++)
        set->bytes += sl->entries[i].len;
    sl->tries = calloc(sl->count + 1, sizeof(*sl->tries)); /* count >= 1 */
    if (sl->tries == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    pick(set, slot, &sl->chosen);
    return RS_OK;
}

rs_status_t rs__replicas_load(rs__replicas_t *set, rs_dir_h dir,
                              const char *model, const rs_version_info_t *v,
                              uint64_t salt, double stale_s, rs_diag_t *diag)
{
    if (set->loaded && set->version == v->version)
        return RS_OK;
    rs__replicas_reset(set);
    set->slots = calloc((size_t)v->slots, sizeof(*set->slots));
    if (set->slots == NULL)
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    set->nslots = v->slots;
    set->version = v->version;
    set->salt = salt;
    set->stale_s = stale_s;
    set->dir = dir;
    set->model = model;
    rs_status_t st = RS_OK;
    for (int64_t s = 0; st == RS_OK && s < v->slots; s++)
        st = load_slot(set, dir, model, s, diag);
    if (st != RS_OK) {
        rs__replicas_reset(set);
        return st;
    }
    set->loaded = 1;
    return RS_OK;
}

const rs_dir_entry_t *rs__replicas_chosen(const rs__replicas_t *set,
                                          int64_t slot)
{
    const rs__replica_slot_t *sl = &set->slots[slot];
    return &sl->entries[sl->chosen];
}

const rs__dir_split_t *rs__replicas_chosen_split(const rs__replicas_t *set,
                                                 int64_t slot)
{
    const rs__replica_slot_t *sl = &set->slots[slot];
    return &sl->splits[sl->chosen];
}

/* Whether msg names the peer "<agent>, slot <S>" as a whole name: peer
 * names stand after "(", " " or at the start (names hold neither). */
static int names_peer(const char *msg, const char *agent, int64_t slot)
{
    char peer[RS_DIR_NAME_MAX + 32];
    int n = snprintf(peer, sizeof(peer), "%s, slot %lld", agent,
                     (long long)slot);
    for (const char *at = strstr(msg, peer); at != NULL;
         at = strstr(at + 1, peer)) {
        char after = at[n];
        if ((at == msg || at[-1] == '(' || at[-1] == ' ') &&
            !(after >= '0' && after <= '9'))
            return 1;
    }
    return 0;
}

static void append(char *buf, size_t cap, const char *fmt, const char *a,
                   int64_t slot, const char *b)
{
    size_t used = strlen(buf);
    if (used + 1 < cap)
        snprintf(buf + used, cap - used, fmt, used ? "; " : "", a,
                 (long long)slot, b);
}

/* Every publisher of an exhausted slot and why reading it failed; a
 * slot's only publisher keeps the message it failed with. */
static rs_status_t exhausted(const rs__replicas_t *set, int64_t slot,
                             rs_status_t st, rs_diag_t *diag)
{
    const rs__replica_slot_t *sl = &set->slots[slot];
    char list[RS_DIAG_MSG_MAX] = "";
    if (sl->count == 1)
        return st;
    for (size_t i = 0; i < sl->count; i++)
        append(list, sizeof(list), "%s%s, slot %lld: %s",
               sl->entries[i].publisher, slot,
               sl->tries[i].failed ? sl->tries[i].why : "not tried");
    return rs__diag_set(diag, st, "slot %lld of version %lld: reading from "
                        "each of its %zu publisher%s failed: %s",
                        (long long)slot, (long long)set->version, sl->count,
                        sl->count == 1 ? "" : "s", list);
}

/* Whether the slot already holds publisher e as it was read now: the
 * same name with the same entry (a restarted publisher's is another). */
static int known(const rs__replica_slot_t *sl, const rs_dir_entry_t *e,
                 const rs__dir_split_t *sp)
{
    for (size_t i = 0; i < sl->count; i++) {
        const rs_dir_entry_t *k = &sl->entries[i];
        if (strcmp(k->publisher, e->publisher) == 0 && k->len == e->len &&
            sl->splits[i].split == sp->split && sl->splits[i].doc == sp->doc &&
            memcmp(k->table, e->table, e->len) == 0)
            return 1;
    }
    return 0;
}

/* Room for one more publisher in the slot's arrays; 0 when out of memory. */
static int grow(rs__replica_slot_t *sl)
{
    size_t n = sl->count + 2;
    rs_dir_entry_t *e = realloc(sl->entries, n * sizeof(*e));
    if (e != NULL)
        sl->entries = e;
    rs__dir_split_t *sp = e != NULL ? realloc(sl->splits, n * sizeof(*sp))
                                    : NULL;
    if (sp != NULL)
        sl->splits = sp;
    rs__replica_try_t *t = sp != NULL ? realloc(sl->tries, n * sizeof(*t))
                                      : NULL;
    if (t == NULL)
        return 0;
    sl->tries = t;
    memset(&sl->tries[sl->count], 0, sizeof(*t));
    return 1;
}

/* Reads the slot from the directory again and adds the publishers the
 * set does not hold yet (a replica that published after the set was
 * loaded, or one restarted since); 1 when it added any. A directory that
 * does not answer adds none: the slot is exhausted as it was known. */
static int reread_slot(rs__replicas_t *set, int64_t slot)
{
    rs__replica_slot_t *sl = &set->slots[slot];
    rs_dir_entry_t *e = NULL;
    rs__dir_split_t *sp = NULL;
    size_t n = 0, added = 0;
    rs_diag_t d;
    if (set->dir == NULL)
        return 0;
    set->rereads++;
    if (rs__dir_read_parts(set->dir, set->model, set->version, slot, &d, &e,
                           &sp, &n) != RS_OK)
        return 0;
    for (size_t i = 0; i < n; i++) {
        if (known(sl, &e[i], &sp[i]) || !grow(sl))
            continue;
        sl->entries[sl->count] = e[i];
        sl->splits[sl->count] = sp[i];
        sl->count++;
        set->bytes += e[i].len;
        e[i].table = NULL; /* the slot's now */
        added++;
    }
    rs_dir_entries_free(e, n);
    free(sp);
    return added > 0;
}

int rs__replicas_renew_chosen(rs__replicas_t *set, int64_t slot)
{
    rs__replica_slot_t *sl = &set->slots[slot];
    rs_dir_entry_t *e = NULL, *mine = &sl->entries[sl->chosen];
    rs__dir_split_t *sp = NULL;
    size_t n = 0;
    rs_diag_t d;
    int renewed = 0;
    if (set->dir == NULL ||
        rs__dir_read_parts(set->dir, set->model, set->version, slot, &d, &e,
                           &sp, &n) != RS_OK)
        return 0;
    for (size_t i = 0; i < n && !renewed; i++) {
        if (strcmp(e[i].publisher, mine->publisher) != 0 ||
            sp[i].doc == sl->splits[sl->chosen].doc)
            continue;
        free(mine->table);
        *mine = e[i];
        sl->splits[sl->chosen] = sp[i];
        set->bytes += e[i].len;
        e[i].table = NULL;
        renewed = 1;
    }
    rs_dir_entries_free(e, n);
    free(sp);
    return renewed;
}

/* Whether slot has a publisher besides its chosen one that did not fail
 * in this pull, reading the slot again when it has none. */
static int has_other(rs__replicas_t *set, int64_t slot)
{
    for (int again = 0; again < 2; again++) {
        const rs__replica_slot_t *sl = &set->slots[slot];
        for (size_t i = 0; i < sl->count; i++)
            if (i != sl->chosen && !sl->tries[i].failed)
                return 1;
        if (again == 0 && !reread_slot(set, slot))
            return 0;
    }
    return 0;
}

/* Marks slot's chosen publisher failed with `cause`; chooses the next,
 * reading the slot again when every publisher it knows failed. */
static int replace_chosen(rs__replicas_t *set, int64_t slot,
                          const char *cause)
{
    rs__replica_slot_t *sl = &set->slots[slot];
    char was[RS_DIR_NAME_MAX + 1];
    snprintf(was, sizeof(was), "%s", sl->entries[sl->chosen].publisher);
    rs__replica_try_t *t = &sl->tries[sl->chosen];
    t->failed = 1;
    snprintf(t->why, sizeof(t->why), "%.*s", (int)sizeof(t->why) - 1, cause);
    add_suspect(set, slot, &sl->entries[sl->chosen]);
    size_t next;
    if (!pick(set, slot, &next) &&
        !(reread_slot(set, slot) && pick(set, slot, &next)))
        return 0;
    append(set->record, sizeof(set->record), "%s%s, slot %lld -> %s", was,
           slot, sl->entries[next].publisher);
    sl->chosen = next;
    set->failovers++;
    return 1;
}

int rs__replicas_failover(rs__replicas_t *set, rs_status_t st, int stalled,
                          rs_diag_t *diag, int *keep_waiting_p)
{
    char cause[RS_DIAG_MSG_MAX];
    if (!set->loaded || diag == NULL ||
        (st != RS_ERR_TRANSPORT && st != RS_ERR_TIMEOUT))
        return 0;
    snprintf(cause, sizeof(cause), "%s", diag->msg);
    size_t hits = 0;
    int64_t out = -1;
    for (int64_t s = 0; s < set->nslots; s++) {
        const rs_dir_entry_t *e = rs__replicas_chosen(set, s);
        if (!names_peer(cause, e->publisher, s))
            continue;
        hits++;
        /* a stall is a failure only where another publisher can serve */
        if (stalled && !has_other(set, s)) {
            if (keep_waiting_p != NULL)
                *keep_waiting_p = 1;
            continue;
        }
        if (!replace_chosen(set, s, cause) && out < 0)
            out = s;
    }
    if (out >= 0)
        exhausted(set, out, st, diag);
    return hits > 0 && out < 0;
}

int rs__replicas_backed(const rs__replicas_t *set)
{
    for (int64_t s = 0; set->loaded && s < set->nslots; s++) {
        const rs__replica_slot_t *sl = &set->slots[s];
        for (size_t i = 0; i < sl->count; i++)
            if (i != sl->chosen && !sl->tries[i].failed)
                return 1;
    }
    return 0;
}

void rs__replicas_failures(const rs__replicas_t *set,
                           rs__replica_failure_fn fn, void *ctx)
{
    for (int64_t s = 0; set->slots != NULL && s < set->nslots; s++) {
        const rs__replica_slot_t *sl = &set->slots[s];
        for (size_t i = 0; i < sl->count; i++)
            if (sl->tries[i].failed)
                fn(ctx, sl->entries[i].publisher, s, sl->tries[i].why);
    }
}
