/* support_doc.c: docs/API.md's support matrix ("What each backend
 * supports") says what the library's table (src/core/support.c) says:
 * one column per backend of the table, one row per feature, "yes" or
 * "no". Usage: conformance_doc PATH/TO/API.md */
#include "core/support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The cells of a row "| a | b | c |" into cell[] (trimmed); their count. */
static int cells(char *line, char cell[][32], int max) {
  int n = 0;
  char *p = strchr(line, '|');
  while (p && n < max) {
    char *q = strchr(p + 1, '|');
    if (q == NULL) break;
    char *a = p + 1, *b = q;
    while (a < b && *a == ' ')
      a++;
    while (b > a && b[-1] == ' ')
      b--;
    snprintf(cell[n++], 32, "%.*s", (int)(b - a), a);
    p = q;
  }
  return n;
}

int main(int argc, char **argv) {
  FILE *f = argc == 2 ? fopen(argv[1], "r") : NULL;
  if (f == NULL) {
    fprintf(stderr, "usage: %s docs/API.md (a readable file)\n", argv[0]);
    return 2;
  }
  char line[512], head[8][32], row[8][32];
  int ncols = 0, bad = 0, rows = 0;
  bool seen[DL_FEAT_COUNT] = {false}, in = false;
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "## ", 3) == 0)
      in = strncmp(line, "## What each backend supports", 29) == 0;
    if (!in || line[0] != '|') continue;
    if (ncols == 0) { /* the header: feature, then the backends */
      ncols = cells(line, head, 8);
      for (int i = 0; dl_backend_name(i); i++) {
        bool found = false;
        for (int j = 1; j < ncols; j++)
          found = found || strcmp(head[j], dl_backend_name(i)) == 0;
        if (!found) {
          printf("API.md's matrix has no column for backend %s\n",
                 dl_backend_name(i));
          bad++;
        }
      }
      continue;
    }
    if (strncmp(line, "|---", 4) == 0) continue;
    int n = cells(line, row, 8);
    dl_feature feat = DL_FEAT_COUNT;
    for (int i = 0; i < DL_FEAT_COUNT; i++)
      if (strcmp(row[0], dl_feature_name((dl_feature)i)) == 0)
        feat = (dl_feature)i;
    if (feat == DL_FEAT_COUNT || n != ncols) {
      printf("API.md's matrix: a row the table does not know: %s", line);
      bad++;
      continue;
    }
    seen[feat] = true;
    rows++;
    for (int j = 1; j < ncols; j++) {
      bool yes = strcmp(row[j], "yes") == 0;
      if (!yes && strcmp(row[j], "no") != 0) {
        printf("API.md's matrix: %s/%s is \"%s\", not yes or no\n", row[0],
               head[j], row[j]);
        bad++;
      } else if (yes != dl_backend_supports(head[j], feat)) {
        printf("API.md's matrix says %s %s %s; the table says otherwise\n",
               head[j], yes ? "has" : "lacks", row[0]);
        bad++;
      }
    }
  }
  fclose(f);
  for (int i = 0; i < DL_FEAT_COUNT; i++)
    if (!seen[i]) {
      printf("API.md's matrix has no row for %s\n",
             dl_feature_name((dl_feature)i));
      bad++;
    }
  printf("%d rows, %d columns checked: %d wrong\n", rows, ncols - 1, bad);
  return bad ? 1 : 0;
}
