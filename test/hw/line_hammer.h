/* SPDX-License-Identifier: MIT */
#ifndef SD_TEST_LINE_HAMMER_H
#define SD_TEST_LINE_HAMMER_H
#ifdef __cplusplus
extern "C" {
#endif
struct sd_cpu;
struct sd_model_line;
/* A fresh hot line (one of four, reused in turn: one test at a time). */
struct sd_model_line *sd_test_line_new(void);
/* The calling CPU @c writes @l: a transfer from its last writer. */
void sd_test_line_write(struct sd_cpu *c, struct sd_model_line *l);
#ifdef __cplusplus
}
#endif
#endif
