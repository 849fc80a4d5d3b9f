/* The human summary `reshard plan` prints without --json: counts, bytes,
 * sessions, fallback sources grouped by cause, uncovered copies, and a final
 * verdict line. Reads the plan through its public accessors only. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/diag.h"
#include "reshard/plan.h"

/* How many example names or records a list shows before "and N more". */
#define SUMMARY_EXAMPLES 3
#define SUMMARY_UNCOVERED_SHOWN 5

static void fmt_bytes(char *buf, size_t size, uint64_t v)
{
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
    double x = (double)v;
    int u = -1;

    while (x >= 1024.0 && u < 4) {
        x /= 1024.0;
        u++;
    }
    if (u < 0)
        snprintf(buf, size, "%" PRIu64 " B", v);
    else
        snprintf(buf, size, "%" PRIu64 " B (%.1f %s)", v, x, units[u]);
}

/* Writes a name with control bytes shown as \xNN, so a hostile or odd name
 * cannot break the layout of the summary; returns the columns written. */
static size_t put_name(FILE *out, const char *s)
{
    size_t cols = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p < 0x20 || *p == 0x7f) {
            fprintf(out, "\\x%02x", *p);
            cols += 4;
        } else {
            fputc(*p, out);
            cols++;
        }
    }
    return cols;
}

/* A list separator then a name. */
static void put_item(FILE *out, const char *sep, const char *name)
{
    fputs(sep, out);
    put_name(out, name);
}

static size_t staging_segments(rs_plan_h plan, int full_pulls)
{
    size_t n, total = 0;
    if (full_pulls) {
        const rs_staged_read_t *fp = rs_plan_staged_reads(plan, &n);
        for (size_t i = 0; i < n; i++)
            total += fp[i].nsegments;
    } else {
        const rs_convert_t *cv = rs_plan_converts(plan, &n);
        for (size_t i = 0; i < n; i++)
            total += cv[i].nsegments;
    }
    return total;
}

static size_t count_kind(rs_plan_h plan, rs_staged_kind_t kind)
{
    size_t n, k = 0;
    const rs_staged_read_t *fp = rs_plan_staged_reads(plan, &n);
    for (size_t i = 0; i < n; i++)
        k += fp[i].kind == kind;
    return k;
}

/* Copies of the capture the plan was built from: the plan's capture
 * appends two derived copies per planned quantized copy. */
static size_t user_copies(rs_plan_h plan)
{
    size_t n, derived = 0;
    const rs_quantized_t *q = rs_plan_quantized(plan, &n);
    for (size_t i = 0; i < n; i++)
        derived += q[i].weight_copy != SIZE_MAX ? 2 : 0;
    return rs_capture_num_copies(rs_plan_capture(plan)) - derived;
}

static void print_counts(rs_plan_h plan, FILE *out)
{
    size_t nseg, nconv, nfull;
    rs_capture_h cap = rs_plan_capture(plan);
    rs_plan_stats_t st;

    rs_plan_stats(plan, &st);
    rs_plan_segments(plan, &nseg);
    rs_plan_converts(plan, &nconv);
    rs_plan_staged_reads(plan, &nfull);
    fprintf(out, "  copies planned      %zu of %zu selected (%zu captured)\n",
            st.copies_planned, st.copies_selected, user_copies(plan));
    (void)cap;
    fprintf(out, "  segments            %zu exact, %zu into convert staging, "
                 "%zu into full-pull staging\n",
            nseg, staging_segments(plan, 0), staging_segments(plan, 1));
    fprintf(out, "  converts            %zu\n", nconv);
    fprintf(out, "  full pulls          %zu (of %zu staged reads)\n",
            count_kind(plan, RS_STAGED_FULL), nfull);
}

static const char *const kind_names[] = {"full", "coalesced", "bound"};

/* The first staged reads, each with its box, bytes and copies. */
static void print_staged(rs_plan_h plan, FILE *out)
{
    size_t n;
    const rs_staged_read_t *fp = rs_plan_staged_reads(plan, &n);
    char buf[64];
    for (size_t i = 0; i < n && i < SUMMARY_EXAMPLES; i++) {
        fmt_bytes(buf, sizeof(buf), fp[i].staging_bytes);
        fputs("    ", out);
        put_name(out, fp[i].src);
        fprintf(out, " %s [", kind_names[fp[i].kind <= 2 ? fp[i].kind : 0]);
        for (int d = 0; d < fp[i].ndim; d++)
            fprintf(out, "%s%" PRId64 ":%" PRId64, d ? ", " : "",
                    fp[i].box_lo[d], fp[i].box_lo[d] + fp[i].box_shape[d]);
        fprintf(out, "] %s, %zu runs, %zu copies\n", buf, fp[i].nsegments,
                fp[i].ncopies);
    }
    if (n > SUMMARY_EXAMPLES)
        fprintf(out, "    and %zu more\n", n - SUMMARY_EXAMPLES);
}

/* The bytes a derived copy writes: its destination's elements. */
static uint64_t copy_bytes(rs_capture_h cap, size_t ci)
{
    rs_copy_desc_t c;
    uint64_t n = 1;
    rs_capture_copy(cap, ci, &c);
    for (int d = 0; d < c.ndim; d++)
        n *= (uint64_t)c.dest_shape[d]; /* checked when it was added */
    return n * rs_dtype_size(c.dest_dtype);
}

/* Per path: copies and bytes (the receiver's staged source boxes, the
 * publisher's FP8 values and scales), then the first copies and why. */
static void print_quantized(rs_plan_h plan, FILE *out)
{
    size_t n, k[3] = {0, 0, 0};
    uint64_t bytes[2] = {0, 0};
    char rb[64], pb[64];
    const rs_quantized_t *q = rs_plan_quantized(plan, &n);
    if (n == 0)
        return;
    for (size_t i = 0; i < n; i++) {
        int p = q[i].weight_copy == SIZE_MAX ? 2 : (int)q[i].path;
        k[p]++;
        if (p == RS_QUANT_PATH_RECEIVER)
            bytes[0] += q[i].staging_bytes;
        else if (p == RS_QUANT_PATH_PUBLISHER)
            bytes[1] += copy_bytes(rs_plan_capture(plan), q[i].weight_copy) +
                        copy_bytes(rs_plan_capture(plan), q[i].scale_copy);
    }
    fmt_bytes(rb, sizeof(rb), bytes[0]);
    fmt_bytes(pb, sizeof(pb), bytes[1]);
    fprintf(out, "  quantized: %zu copies: receiver %zu (%s of source boxes, "
                 "quantized here), publisher %zu (%s of FP8 values and "
                 "scales), refused %zu\n", n, k[0], rb, k[1], pb, k[2]);
    for (size_t i = 0; i < n && i < SUMMARY_EXAMPLES; i++) {
        fprintf(out, "    copy %zu of ", q[i].copy);
        put_name(out, q[i].src);
        fprintf(out, ": %s: ", q[i].weight_copy == SIZE_MAX ? "refused"
                               : q[i].path == RS_QUANT_PATH_PUBLISHER
                                   ? "publisher" : "receiver");
        put_name(out, q[i].why);
        fputc('\n', out);
    }
    if (n > SUMMARY_EXAMPLES)
        fprintf(out, "    and %zu more\n", n - SUMMARY_EXAMPLES);
}

static void print_bytes(rs_plan_h plan, FILE *out)
{
    rs_plan_stats_t st;
    char planned[64], exact[64], extra[64];

    rs_plan_stats(plan, &st);
    fmt_bytes(planned, sizeof(planned), st.bytes_planned);
    fmt_bytes(exact, sizeof(exact), st.exact_bytes);
    fmt_bytes(extra, sizeof(extra), st.extra_wire_bytes);
    fprintf(out, "  bytes planned       %s\n", planned);
    fprintf(out, "  bytes needed        %s (extra on the wire: %s)\n", exact,
            extra);
    fprintf(out, "  estimated time      %.6f s (exact plan: %.6f s; most "
                 "loaded session, bytes over the NIC rate plus descriptors "
                 "times their cost)\n", st.est_seconds, st.exact_est_seconds);
    fprintf(out, "  descriptors         %" PRIu64 " (exact plan: %" PRIu64
                 ", saved: %" PRIu64 ")\n",
            st.descriptor_count, st.exact_descriptor_count,
            st.descriptor_savings);
}

typedef struct named_bytes {
    const char *name;
    uint64_t bytes;
} named_bytes_t;

static int cmp_named(const void *a, const void *b)
{
    return strcmp(((const named_bytes_t *)a)->name,
                  ((const named_bytes_t *)b)->name);
}

static int print_sessions(rs_plan_h plan, FILE *out)
{
    size_t total = rs_plan_num_sessions(plan), n = 0;
    named_bytes_t *used = malloc((total ? total : 1) * sizeof(*used));
    char buf[64];

    if (used == NULL)
        return 0;
    for (uint32_t i = 0; i < total; i++) {
        uint64_t b = rs_plan_session_bytes(plan, i);
        if (b > 0) {
            used[n].name = rs_plan_session_name(plan, i);
            used[n++].bytes = b;
        }
    }
    qsort(used, n, sizeof(*used), cmp_named);
    fprintf(out, "  sessions used       %zu of %zu\n", n, total);
    for (size_t i = 0; i < n; i++) {
        fmt_bytes(buf, sizeof(buf), used[i].bytes);
        fputs("    ", out);
        for (size_t w = put_name(out, used[i].name); w < 30; w++)
            fputc(' ', out);
        fprintf(out, " %s\n", buf);
    }
    free(used);
    return 1;
}

/* A fallback source and its reason, sortable by reason to group causes. */
typedef struct fb_entry {
    const char *src;
    const char *reason;
} fb_entry_t;

static int cmp_fb(const void *a, const void *b)
{
    const fb_entry_t *x = a, *y = b;
    int c = strcmp(x->reason, y->reason);
    return c ? c : strcmp(x->src, y->src);
}

static void print_group(FILE *out, const fb_entry_t *e, size_t n)
{
    fprintf(out, "    %zu x ", n);
    put_name(out, e[0].reason);
    fputs("\n      ", out);
    for (size_t i = 0; i < n && i < SUMMARY_EXAMPLES; i++)
        put_item(out, i ? ", " : "", e[i].src);
    if (n > SUMMARY_EXAMPLES)
        fprintf(out, " and %zu more", n - SUMMARY_EXAMPLES);
    fputc('\n', out);
}

/* A run of fallback entries sharing one reason. */
typedef struct fb_group {
    const fb_entry_t *first;
    size_t count;
} fb_group_t;

/* Most common cause first; ties by reason text, so the output is stable. */
static int cmp_group(const void *a, const void *b)
{
    const fb_group_t *x = a, *y = b;
    if (x->count != y->count)
        return x->count > y->count ? -1 : 1;
    return strcmp(x->first->reason, y->first->reason);
}

static int print_groups(FILE *out, const fb_entry_t *e, size_t n)
{
    fb_group_t *groups = malloc((n ? n : 1) * sizeof(*groups));
    size_t ngroups = 0;

    if (groups == NULL)
        return 0;
    for (size_t start = 0, end; start < n; start = end) {
        for (end = start + 1;
             end < n && strcmp(e[end].reason, e[start].reason) == 0; end++)
            ;
        groups[ngroups].first = e + start;
        groups[ngroups++].count = end - start;
    }
    qsort(groups, ngroups, sizeof(*groups), cmp_group);
    for (size_t i = 0; i < ngroups; i++)
        print_group(out, groups[i].first, groups[i].count);
    free(groups);
    return 1;
}

static int print_fallback(rs_plan_h plan, FILE *out)
{
    size_t n = rs_plan_num_fallback(plan);
    fb_entry_t *e = malloc((n ? n : 1) * sizeof(*e));
    int ok;

    if (e == NULL)
        return 0;
    for (size_t i = 0; i < n; i++) {
        rs_plan_fallback(plan, i, &e[i].src, &e[i].reason);
        if (e[i].reason == NULL)
            e[i].reason = "(no reason given)";
    }
    qsort(e, n, sizeof(*e), cmp_fb);
    fprintf(out, "  fallback sources    %zu\n", n);
    if (rs_plan_num_mismatched(plan) > 0)
        fprintf(out, "    of which %zu model mismatch(es): published with "
                "another shape or dtype than the capture assumes\n",
                rs_plan_num_mismatched(plan));
    ok = print_groups(out, e, n);
    free(e);
    return ok;
}

static void print_unbounded(rs_plan_h plan, FILE *out)
{
    size_t n = rs_plan_num_unbounded(plan);
    fprintf(out, "  unbounded sources   %zu", n);
    for (size_t i = 0; i < n && i < SUMMARY_EXAMPLES; i++)
        put_item(out, i ? ", " : ": ", rs_plan_unbounded(plan, i));
    if (n > SUMMARY_EXAMPLES)
        fprintf(out, " and %zu more", n - SUMMARY_EXAMPLES);
    fputc('\n', out);
}

static void print_uncovered(rs_plan_h plan, FILE *out)
{
    size_t n;
    uint64_t missing = 0;
    const rs_uncovered_t *u = rs_plan_uncovered(plan, &n);

    for (size_t i = 0; i < n; i++)
        missing += u[i].missing_elements;
    fprintf(out, "  uncovered copies    %zu", n);
    if (n > 0)
        fprintf(out, " (%" PRIu64 " elements missing)", missing);
    fputc('\n', out);
    for (size_t i = 0; i < n && i < SUMMARY_UNCOVERED_SHOWN; i++) {
        fprintf(out, "    copy %zu: ", u[i].copy);
        put_name(out, u[i].src);
        put_item(out, " -> ", u[i].param);
        fprintf(out, ", %" PRIu64 " elements missing\n", u[i].missing_elements);
    }
    if (n > SUMMARY_UNCOVERED_SHOWN)
        fprintf(out, "    and %zu more\n", n - SUMMARY_UNCOVERED_SHOWN);
}

static void print_verdict(rs_plan_h plan, FILE *out)
{
    size_t nunc;
    rs_plan_uncovered(plan, &nunc);
    if (rs_plan_is_complete(plan))
        fprintf(out, "plan complete\n");
    else
        fprintf(out, "plan INCOMPLETE: %zu fallback source(s), %zu uncovered "
                     "copy(ies)\n",
                rs_plan_num_fallback(plan), nunc);
}

rs_status_t rs_plan_write_summary(rs_plan_h plan, FILE *out, rs_diag_t *diag)
{
    if (plan == NULL || out == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "NULL argument");
    if (rs_plan_capture(plan) == NULL)
        return rs__diag_set(diag, RS_ERR_INVALID_ARG, "plan has no capture");
    fprintf(out, "reshard plan\n");
    print_counts(plan, out);
    print_staged(plan, out);
    print_quantized(plan, out);
    print_bytes(plan, out);
    if (!print_sessions(plan, out) || !print_fallback(plan, out))
        return rs__diag_set(diag, RS_ERR_NO_MEMORY, "out of memory");
    print_unbounded(plan, out);
    print_uncovered(plan, out);
    print_verdict(plan, out);
    if (fflush(out) != 0 || ferror(out))
        return rs__diag_set(diag, RS_ERR_IO, "writing the summary failed");
    return RS_OK;
}
