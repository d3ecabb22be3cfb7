/*
 * The doorbell-cost model of bench/incumbent, the C twin of
 * verbs-core/examples/vs_libmlx5.rs's `doorbell_cost`: what a doorbell to
 * real MMIO costs beyond the store to ordinary memory the benchmark makes.
 * Chosen by the environment variable DOORBELL_MODEL:
 *   nt      a non-temporal 8-byte store to a page of its own and an sfence
 *           (the default): the store leaves the cache like an uncached or
 *           write-combining MMIO write does;
 *   spin:N  N pause instructions (a fixed delay);
 *   none    nothing.
 */
#ifndef DOORBELL_MODEL_H
#define DOORBELL_MODEL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

static int db_kind = 1; /* 0 none, 1 nt, 2 spin */
static unsigned db_spins;
static uint64_t db_page[512] __attribute__((aligned(4096)));

static void doorbell_model_init(void)
{
	const char *m = getenv("DOORBELL_MODEL");

	if (!m || !strcmp(m, "nt"))
		db_kind = 1;
	else if (!strcmp(m, "none"))
		db_kind = 0;
	else if (!strncmp(m, "spin:", 5)) {
		db_kind = 2;
		db_spins = strtoul(m + 5, NULL, 0);
	} else {
		fprintf(stderr, "DOORBELL_MODEL must be nt, none or spin:N, not %s\n", m);
		exit(2);
	}
}

static inline __attribute__((always_inline)) void doorbell_cost(void)
{
	unsigned i;

	if (db_kind == 1) {
#if defined(__x86_64__)
		_mm_stream_si64((long long *)db_page, (long long)db_page[1]);
		_mm_sfence();
#else
		__atomic_store_n(&db_page[0], db_page[1], __ATOMIC_SEQ_CST);
#endif
	} else if (db_kind == 2) {
		for (i = 0; i < db_spins; i++) {
#if defined(__x86_64__)
			_mm_pause();
#else
			__asm__ volatile("yield");
#endif
		}
	}
}

#endif
