/*
 * tools/flamegraph.c - draw folded stacks as an SVG flame graph: the root
 * at the bottom, callees above their callers, each frame as wide as the
 * value it and its callees hold; siblings in name order (Brendan Gregg's
 * flamegraph.pl layout), a tooltip per frame.
 */
#define _GNU_SOURCE
#include "flamegraph.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define WIDTH      1200
#define PAD        10
#define FRAME_H    17
#define TOP        44          /* title and legend */
#define MIN_PX     0.2         /* narrower frames are not drawn */

struct node {
    char        *name;
    double       value;        /* this frame and its callees */
    struct node **kid;
    size_t       nkid, cap;
};

static struct node *child(struct node *p, const char *name, size_t len)
{
    for (size_t i = 0; i < p->nkid; i++)
        if (strlen(p->kid[i]->name) == len && !memcmp(p->kid[i]->name, name, len))
            return p->kid[i];
    if (p->nkid == p->cap) {
        p->cap = p->cap ? p->cap * 2 : 4;
        p->kid = realloc(p->kid, p->cap * sizeof *p->kid);
        if (!p->kid)
            return NULL;
    }
    struct node *n = calloc(1, sizeof *n);
    if (!n || !(n->name = strndup(name, len)))
        return NULL;
    p->kid[p->nkid++] = n;
    return n;
}

static int by_name(const void *a, const void *b)
{
    return strcmp((*(struct node *const *)a)->name, (*(struct node *const *)b)->name);
}

static int depth_of(const struct node *n)
{
    int d = 0;
    for (size_t i = 0; i < n->nkid; i++) {
        int k = depth_of(n->kid[i]);
        if (k > d)
            d = k;
    }
    return d + 1;
}

static void xml_text(FILE *out, const char *s, size_t max)
{
    for (size_t i = 0; s[i] && i < max; i++) {
        switch (s[i]) {
        case '<': fputs("&lt;", out); break;
        case '>': fputs("&gt;", out); break;
        case '&': fputs("&amp;", out); break;
        case '"': fputs("&quot;", out); break;
        default: fputc(s[i], out);
        }
    }
}

/* A warm colour from the name (stable across runs). */
static void colour(const char *name, int *r, int *g, int *b)
{
    uint32_t h = 2166136261u;
    for (const char *p = name; *p; p++)
        h = (h ^ (uint8_t)*p) * 16777619u;
    *r = 205 + (int)(h % 50);
    *g = 60 + (int)((h >> 8) % 170);
    *b = (int)((h >> 16) % 55);
}

struct ctx {
    FILE       *out;
    double      total, scale;
    int         height;
    const char *unit;
};

static void draw(const struct ctx *c, struct node *n, double x, int depth)
{
    double w = n->value * c->scale;
    if (w < MIN_PX)
        return;
    int y = c->height - PAD - (depth + 1) * FRAME_H;
    int r, g, b;
    colour(n->name, &r, &g, &b);
    fprintf(c->out, "<g><title>");
    xml_text(c->out, n->name, 4096);
    fprintf(c->out, " (%.0f %s, %.2f%%)</title>", n->value, c->unit,
            100 * n->value / c->total);
    fprintf(c->out, "<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\" "
            "fill=\"rgb(%d,%d,%d)\" rx=\"2\"/>", x, y, w, FRAME_H - 1, r, g, b);
    size_t fit = (size_t)((w - 6) / 7);
    if (fit >= 3) {
        size_t len = strlen(n->name);
        fprintf(c->out, "<text x=\"%.1f\" y=\"%d\">", x + 3, y + FRAME_H - 5);
        xml_text(c->out, n->name, len <= fit ? len : fit - 2);
        if (len > fit)
            fputs("..", c->out);
        fputs("</text>", c->out);
    }
    fputs("</g>\n", c->out);
    qsort(n->kid, n->nkid, sizeof *n->kid, by_name);
    for (size_t i = 0; i < n->nkid; i++) {
        draw(c, n->kid[i], x, depth + 1);
        x += n->kid[i]->value * c->scale;
    }
}

static void free_tree(struct node *n)
{
    for (size_t i = 0; i < n->nkid; i++)
        free_tree(n->kid[i]);
    free(n->kid);
    free(n->name);
    free(n);
}

int flamegraph_svg(FILE *in, FILE *out, const char *title, const char *unit)
{
    struct node *root = calloc(1, sizeof *root);
    if (!root || !(root->name = strdup("all")))
        return -1;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    unsigned long lineno = 0;
    int rc = 0;
    while ((len = getline(&line, &cap, in)) >= 0) {
        lineno++;
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = 0;
        if (!len)
            continue;
        char *sp = strrchr(line, ' '), *end;
        double v = sp ? strtod(sp + 1, &end) : 0;
        if (!sp || sp == line || *end || v < 0) {
            fprintf(stderr, "flamegraph: line %lu: expected \"frame;frame;... value\"\n",
                    lineno);
            rc = -1;
            break;
        }
        *sp = 0;
        struct node *n = root;
        root->value += v;
        for (char *f = line; n;) {
            char *semi = strchr(f, ';');
            size_t flen = semi ? (size_t)(semi - f) : strlen(f);
            if (!(n = child(n, f, flen)))
                break;
            n->value += v;
            if (!semi)
                break;
            f = semi + 1;
        }
        if (!n) {
            fprintf(stderr, "flamegraph: out of memory\n");
            rc = -1;
            break;
        }
    }
    free(line);
    if (rc == 0) {
        struct ctx c = { out, root->value > 0 ? root->value : 1, 0, 0, unit };
        c.scale = (WIDTH - 2 * PAD) / c.total;
        c.height = TOP + depth_of(root) * FRAME_H + 2 * PAD;
        fprintf(out, "<?xml version=\"1.0\" standalone=\"no\"?>\n"
                "<svg version=\"1.1\" width=\"%d\" height=\"%d\" "
                "xmlns=\"http://www.w3.org/2000/svg\" "
                "font-family=\"Verdana, sans-serif\" font-size=\"12\">\n"
                "<rect x=\"0\" y=\"0\" width=\"100%%\" height=\"100%%\" fill=\"#f8f8f2\"/>\n"
                "<text x=\"%d\" y=\"22\" text-anchor=\"middle\" font-size=\"17\">",
                WIDTH, c.height, WIDTH / 2);
        xml_text(out, title, 200);
        fprintf(out, "</text>\n<text x=\"%d\" y=\"38\" text-anchor=\"middle\" "
                "fill=\"#555\">total %.0f %s; width of a frame: its %s and its "
                "callees'</text>\n", WIDTH / 2, root->value, unit, unit);
        draw(&c, root, PAD, 0);
        fputs("</svg>\n", out);
    }
    free_tree(root);
    return rc;
}
