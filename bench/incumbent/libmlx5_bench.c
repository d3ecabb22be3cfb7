/*
 * The incumbent's side of bench/incumbent: rdma-core's mlx5 provider
 * (libmlx5.a + libibverbs.a, built from source by run.sh) driven through
 * its usual verbs entry points on provider objects filled by hand, with
 * queues, doorbell records and the UAR page in ordinary memory, as the
 * golden vectors were produced (see data/prm and the README's data-path
 * section). No device, no kernel, no ibv_open_device.
 *
 * The objects carry the values QP and CQ creation gives the fixtures of the
 * golden vectors (rc_qp, ud_qp, cq0), in the provider's cheapest
 * configuration: no locks (as with MLX5_SINGLE_THREADED=1), no CQ stalling,
 * prefer_bf and shut_up_bf 0.
 *
 * Every measured operation is one `lib_*` function (noinline), so
 * `valgrind --tool=callgrind --toggle-collect='lib_*'` counts exactly their
 * instructions; run.sh reads each function's inclusive cost. Without
 * valgrind the same program prints nanoseconds per operation.
 *
 * usage: libmlx5_bench N [scenario...]   (prints "ops <fn> <count>" and
 *        "ns <fn> <ns per op>" lines)
 *
 * This file only includes rdma-core's headers from its build tree; no
 * rdma-core code is copied here.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <time.h>
#include <endian.h>
#include <pthread.h>

#include "mlx5.h"
#include "wqe.h"
#include "doorbell_model.h"

#define NOINL __attribute__((noinline, used))

static struct mlx5_context *ctx;
static struct mlx5_cq cq;
static struct mlx5_qp rc, ud;
static struct mlx5_bf bf_rc, bf_ud;
static struct mlx5_ah ah;
static uint8_t *cq_mem;
static uint32_t cq_dbrec[2] __attribute__((aligned(8)));
static const unsigned CQ_ENTRIES = 256;

static void *zalloc(size_t n)
{
	void *p;

	if (posix_memalign(&p, 4096, n))
		abort();
	memset(p, 0, n);
	return p;
}

struct geometry {
	unsigned sq_wqebbs, sq_max_post, sq_max_gs, max_inline;
	unsigned rq_entries, rq_shift, rq_max_gs;
	unsigned rq_offset, sq_offset, total;
};

/* The fixtures' geometry (libmlx5-vectors.md: rc_qp and ud_qp). */
static const struct geometry RC_GEO = { 1024, 170, 4, 188, 64, 6, 4, 0x0, 0x1000, 69632 };
static const struct geometry UD_GEO = { 256, 85, 2, 124, 64, 4, 1, 0x0, 0x400, 0x400 + 256 * 64 };

static void make_qp(struct mlx5_qp *qp, struct mlx5_bf *bf, enum ibv_qp_type type,
		    uint32_t qpn, const struct geometry *g, uint64_t send_ops,
		    uint64_t sq_wrid_base, uint64_t rq_wrid_base)
{
	struct ibv_qp_init_attr_ex attr;
	unsigned i;

	memset(qp, 0, sizeof(*qp));
	qp->rsc.type = MLX5_RSC_TYPE_QP;
	qp->rsc.rsn = mlx5_store_uidx(ctx, qp);
	qp->ibv_qp = &qp->verbs_qp.qp;
	qp->ibv_qp->context = &ctx->ibv_ctx.context;
	qp->ibv_qp->qp_num = qpn;
	qp->ibv_qp->qp_type = type;
	qp->ibv_qp->state = IBV_QPS_RTS;
	qp->ibv_qp->send_cq = &cq.verbs_cq.cq;
	qp->ibv_qp->recv_cq = &cq.verbs_cq.cq;

	qp->buf.buf = zalloc(g->total);
	qp->buf.length = g->total;
	qp->buf_size = g->total;
	qp->sq_start = (uint8_t *)qp->buf.buf + g->sq_offset;
	qp->max_inline_data = g->max_inline;

	qp->sq.wqe_cnt = g->sq_wqebbs;
	qp->sq.wqe_shift = 6;
	qp->sq.max_post = g->sq_max_post;
	qp->sq.max_gs = g->sq_max_gs;
	qp->sq.qp_state_max_gs = g->sq_max_gs;
	qp->sq.offset = g->sq_offset;
	qp->sq.qend = (uint8_t *)qp->buf.buf + g->sq_offset + (g->sq_wqebbs << 6);
	qp->sq.wrid = calloc(g->sq_wqebbs, sizeof(uint64_t));
	qp->sq.wqe_head = calloc(g->sq_wqebbs, sizeof(unsigned));
	qp->sq.wr_data = calloc(g->sq_wqebbs, sizeof(uint32_t));
	for (i = 0; i < g->sq_wqebbs; i++) {
		qp->sq.wrid[i] = sq_wrid_base + i;
		qp->sq.wqe_head[i] = i;
	}

	qp->rq.wqe_cnt = g->rq_entries;
	qp->rq.wqe_shift = g->rq_shift;
	qp->rq.max_post = g->rq_entries;
	qp->rq.max_gs = g->rq_max_gs;
	qp->rq.qp_state_max_gs = g->rq_max_gs;
	qp->rq.offset = g->rq_offset;
	qp->rq.wrid = calloc(g->rq_entries, sizeof(uint64_t));
	for (i = 0; i < g->rq_entries; i++)
		qp->rq.wrid[i] = rq_wrid_base + i;

	qp->db = zalloc(4096);
	qp->atomics_enabled = type == IBV_QPT_RC;

	/* A dedicated, dynamically allocated BlueFlame register without a
	 * lock, at offset 0x800 of its own UAR page (ordinary memory). */
	memset(bf, 0, sizeof(*bf));
	bf->uar = zalloc(4096);
	bf->reg = (uint8_t *)bf->uar + 0x800;
	bf->buf_size = 256;
	bf->uuarn = 1;
	bf->need_lock = 0;
	qp->bf = bf;

	/* The ibv_wr_* builders, installed by the library's own function. */
	memset(&attr, 0, sizeof(attr));
	attr.qp_type = type;
	attr.comp_mask = IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	attr.send_ops_flags = send_ops;
	if (mlx5_qp_fill_wr_pfns(qp, &attr, NULL)) {
		fprintf(stderr, "mlx5_qp_fill_wr_pfns failed\n");
		exit(1);
	}
	qp->verbs_qp.comp_mask |= VERBS_QP_EX;
}

static void setup(void)
{
	unsigned i;

	ctx = calloc(1, sizeof(*ctx));
	pthread_mutex_init(&ctx->uidx_table_mutex, NULL);
	ctx->cqe_version = 1;
	ctx->prefer_bf = 0;
	ctx->shut_up_bf = 0;
	ctx->ibv_ctx.context.ops.post_send = mlx5_post_send;
	ctx->ibv_ctx.context.ops.post_recv = mlx5_post_recv;
	ctx->ibv_ctx.context.ops.poll_cq = mlx5_poll_cq_v1;
	/* Five resources first, so rc_qp gets user index 5 and ud_qp 6. */
	for (i = 0; i < 5; i++)
		mlx5_store_uidx(ctx, &cq);

	memset(&cq, 0, sizeof(cq));
	cq.verbs_cq.cq.context = &ctx->ibv_ctx.context;
	cq.verbs_cq.cq.cqe = CQ_ENTRIES - 1;
	cq_mem = zalloc(64 * CQ_ENTRIES);
	for (i = 0; i < CQ_ENTRIES; i++)
		cq_mem[64 * i + 63] = 0xf0;
	cq.buf_a.buf = cq_mem;
	cq.buf_a.length = 64 * CQ_ENTRIES;
	cq.active_buf = &cq.buf_a;
	cq.active_cqes = CQ_ENTRIES;
	cq.cqe_sz = 64;
	cq.cqn = 7;
	cq.dbrec = (__be32 *)cq_dbrec;
	cq.stall_enable = 0;
	cq.cached_opcode = -1;

	make_qp(&rc, &bf_rc, IBV_QPT_RC, 0x123, &RC_GEO, 0x3ff,
		0x5351000000000000ull, 0x5251000000000000ull);
	make_qp(&ud, &bf_ud, IBV_QPT_UD, 0x124, &UD_GEO,
		IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM,
		0x5553000000000000ull, 0x5552000000000000ull);
	if (rc.rsc.rsn != 5 || ud.rsc.rsn != 6) {
		fprintf(stderr, "unexpected user indexes %u %u\n", rc.rsc.rsn, ud.rsc.rsn);
		exit(1);
	}

	/* The address handle ah_ib_lid (IB, dlid 0x17, sl 3, no GRH): the
	 * address vector's fields as mlx5_create_ah fills them. */
	memset(&ah, 0, sizeof(ah));
	ah.ibv_ah.context = &ctx->ibv_ctx.context;
	ah.av.stat_rate_sl = 3;
	ah.av.rlid = htobe16(0x17);
}

/* The work requests of the scenarios (the golden vectors' defaults). */
static struct ibv_sge sge = { 0x1122334455667788ull, 4096, 0x00abcd01 };
static struct ibv_sge ud_sge = { 0x1122334455667788ull, 256, 0x00abcd01 };
static uint8_t inline_data[64];
static struct ibv_sge inline_sge = { 0, 64, 0 };
static struct ibv_send_wr wr_write, wr_writes[32], wr_inline, wr_ud;
static struct ibv_recv_wr wr_recv;
static struct ibv_sge recv_sge = { 0x1122334455667788ull, 4096, 0x00abcd01 };

static void make_wrs(void)
{
	unsigned i;

	for (i = 0; i < 64; i++)
		inline_data[i] = i;
	inline_sge.addr = (uintptr_t)inline_data;

	memset(&wr_write, 0, sizeof(wr_write));
	wr_write.wr_id = 7;
	wr_write.opcode = IBV_WR_RDMA_WRITE;
	wr_write.send_flags = IBV_SEND_SIGNALED;
	wr_write.sg_list = &sge;
	wr_write.num_sge = 1;
	wr_write.wr.rdma.remote_addr = 0x0a0b0c0d0e0f1011ull;
	wr_write.wr.rdma.rkey = 0x00123402;
	for (i = 0; i < 32; i++) {
		wr_writes[i] = wr_write;
		wr_writes[i].wr_id = i;
		wr_writes[i].next = i < 31 ? &wr_writes[i + 1] : NULL;
	}

	memset(&wr_inline, 0, sizeof(wr_inline));
	wr_inline.wr_id = 7;
	wr_inline.opcode = IBV_WR_SEND;
	wr_inline.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	wr_inline.sg_list = &inline_sge;
	wr_inline.num_sge = 1;

	memset(&wr_ud, 0, sizeof(wr_ud));
	wr_ud.wr_id = 7;
	wr_ud.opcode = IBV_WR_SEND;
	wr_ud.send_flags = IBV_SEND_SIGNALED;
	wr_ud.sg_list = &ud_sge;
	wr_ud.num_sge = 1;
	wr_ud.wr.ud.ah = &ah.ibv_ah;
	wr_ud.wr.ud.remote_qpn = 0x456;
	wr_ud.wr.ud.remote_qkey = 0x11111111;

	memset(&wr_recv, 0, sizeof(wr_recv));
	wr_recv.wr_id = 7;
	wr_recv.sg_list = &recv_sge;
	wr_recv.num_sge = 1;
}

/* ---- measured operations ---------------------------------------------- */

NOINL int lib_post1(struct ibv_qp *qp, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad;

	return ibv_post_send(qp, wr, &bad);
}

NOINL int lib_post1_wr(struct ibv_qp_ex *qpx, uint64_t wr_id)
{
	qpx->wr_id = wr_id;
	qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_start(qpx);
	ibv_wr_rdma_write(qpx, 0x00123402, 0x0a0b0c0d0e0f1011ull);
	ibv_wr_set_sge(qpx, 0x00abcd01, 0x1122334455667788ull, 4096);
	return ibv_wr_complete(qpx);
}

NOINL int lib_post32(struct ibv_qp *qp, struct ibv_send_wr *wrs)
{
	struct ibv_send_wr *bad;

	return ibv_post_send(qp, wrs, &bad);
}

NOINL int lib_post32_wr(struct ibv_qp_ex *qpx)
{
	unsigned i;

	ibv_wr_start(qpx);
	for (i = 0; i < 32; i++) {
		qpx->wr_id = i;
		qpx->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_rdma_write(qpx, 0x00123402, 0x0a0b0c0d0e0f1011ull);
		ibv_wr_set_sge(qpx, 0x00abcd01, 0x1122334455667788ull, 4096);
	}
	return ibv_wr_complete(qpx);
}

NOINL int lib_post1_db(struct ibv_qp *qp, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad;
	int ret = ibv_post_send(qp, wr, &bad);

	doorbell_cost();
	return ret;
}

NOINL int lib_post1_wr_db(struct ibv_qp_ex *qpx, uint64_t wr_id)
{
	int ret;

	qpx->wr_id = wr_id;
	qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_start(qpx);
	ibv_wr_rdma_write(qpx, 0x00123402, 0x0a0b0c0d0e0f1011ull);
	ibv_wr_set_sge(qpx, 0x00abcd01, 0x1122334455667788ull, 4096);
	ret = ibv_wr_complete(qpx);
	doorbell_cost();
	return ret;
}

NOINL int lib_post32_db(struct ibv_qp *qp, struct ibv_send_wr *wrs)
{
	struct ibv_send_wr *bad;
	int ret = ibv_post_send(qp, wrs, &bad);

	doorbell_cost();
	return ret;
}

NOINL int lib_post32_wr_db(struct ibv_qp_ex *qpx)
{
	unsigned i;
	int ret;

	ibv_wr_start(qpx);
	for (i = 0; i < 32; i++) {
		qpx->wr_id = i;
		qpx->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_rdma_write(qpx, 0x00123402, 0x0a0b0c0d0e0f1011ull);
		ibv_wr_set_sge(qpx, 0x00abcd01, 0x1122334455667788ull, 4096);
	}
	ret = ibv_wr_complete(qpx);
	doorbell_cost();
	return ret;
}

NOINL int lib_inline64(struct ibv_qp *qp, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad;

	return ibv_post_send(qp, wr, &bad);
}

NOINL int lib_inline64_wr(struct ibv_qp_ex *qpx, const void *data, size_t len)
{
	qpx->wr_id = 7;
	qpx->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	ibv_wr_start(qpx);
	ibv_wr_send(qpx);
	ibv_wr_set_inline_data(qpx, (void *)data, len);
	return ibv_wr_complete(qpx);
}

NOINL int lib_ud(struct ibv_qp *qp, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad;

	return ibv_post_send(qp, wr, &bad);
}

NOINL int lib_ud_wr(struct ibv_qp_ex *qpx, struct ibv_ah *a)
{
	qpx->wr_id = 7;
	qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_start(qpx);
	ibv_wr_send(qpx);
	ibv_wr_set_ud_addr(qpx, a, 0x456, 0x11111111);
	ibv_wr_set_sge(qpx, 0x00abcd01, 0x1122334455667788ull, 256);
	return ibv_wr_complete(qpx);
}

NOINL int lib_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr)
{
	struct ibv_recv_wr *bad;

	return ibv_post_recv(qp, wr, &bad);
}

NOINL int lib_poll1(struct ibv_cq *c, struct ibv_wc *wc)
{
	return ibv_poll_cq(c, 1, wc);
}

NOINL int lib_poll32(struct ibv_cq *c, struct ibv_wc *wc)
{
	return ibv_poll_cq(c, 32, wc);
}

/* ---- the harness (unmeasured) ------------------------------------------ */

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

/* What polling the completions would do to the queue: everything posted
 * is retired. */
static void retire_sq(struct mlx5_qp *qp) { qp->sq.tail = qp->sq.head; }
static void retire_rq(struct mlx5_qp *qp) { qp->rq.tail = qp->rq.head; }

/* The device writes a requester CQE (RDMA write) of rc_qp for WQE counter
 * `counter` at consumer index `ci`. */
static void device_cqe(uint32_t ci, uint16_t counter)
{
	uint8_t *p = cq_mem + 64 * (ci & (CQ_ENTRIES - 1));
	uint8_t owner = (ci / CQ_ENTRIES) & 1;
	uint32_t v;

	memset(p, 0, 63);
	v = htobe32(5);
	memcpy(p + 0x20, &v, 4);
	v = htobe32(0x08000000 | 0x123);
	memcpy(p + 0x38, &v, 4);
	counter = htobe16(counter);
	memcpy(p + 0x3c, &counter, 2);
	__atomic_store_n(p + 63, (uint8_t)((MLX5_CQE_REQ << 4) | owner), __ATOMIC_RELEASE);
}

static void check(int ret, const char *what)
{
	if (ret) {
		fprintf(stderr, "%s failed: %d\n", what, ret);
		exit(1);
	}
}

static void report(const char *fn, double dt, uint64_t ops)
{
	printf("ops %s %llu\n", fn, (unsigned long long)ops);
	printf("ns %s %.3f\n", fn, dt / ops);
}

static int wanted(int argc, char **argv, const char *name)
{
	int i;

	if (argc <= 2)
		return 1;
	for (i = 2; i < argc; i++)
		if (!strcmp(argv[i], name))
			return 1;
	return 0;
}

enum post_kind { P_POST, P_WR, P_POST_DB, P_WR_DB, P_INLINE, P_INLINE_WR, P_UD, P_UD_WR };

static void run_single(const char *fn, enum post_kind k, uint64_t n)
{
	struct mlx5_qp *qp = (k == P_UD || k == P_UD_WR) ? &ud : &rc;
	struct ibv_qp_ex *qpx = &qp->verbs_qp.qp_ex;
	uint64_t done = 0, i, chunk, max = qp->sq.max_post - 1;
	double dt = 0, t;

	while (done < n) {
		chunk = n - done < max ? n - done : max;
		t = now_ns();
		for (i = 0; i < chunk; i++) {
			switch (k) {
			case P_POST: check(lib_post1(qp->ibv_qp, &wr_write), fn); break;
			case P_WR: check(lib_post1_wr(qpx, done + i), fn); break;
			case P_POST_DB: check(lib_post1_db(qp->ibv_qp, &wr_write), fn); break;
			case P_WR_DB: check(lib_post1_wr_db(qpx, done + i), fn); break;
			case P_INLINE: check(lib_inline64(qp->ibv_qp, &wr_inline), fn); break;
			case P_INLINE_WR: check(lib_inline64_wr(qpx, inline_data, inline_sge.length), fn); break;
			case P_UD: check(lib_ud(qp->ibv_qp, &wr_ud), fn); break;
			case P_UD_WR: check(lib_ud_wr(qpx, &ah.ibv_ah), fn); break;
			}
		}
		dt += now_ns() - t;
		done += chunk;
		retire_sq(qp);
	}
	report(fn, dt, n);
}

static void run_batch(const char *fn, enum post_kind k, uint64_t n)
{
	struct ibv_qp_ex *qpx = &rc.verbs_qp.qp_ex;
	double dt = 0, t;
	uint64_t i;

	for (i = 0; i < n; i++) {
		t = now_ns();
		switch (k) {
		case P_POST: check(lib_post32(rc.ibv_qp, wr_writes), fn); break;
		case P_WR: check(lib_post32_wr(qpx), fn); break;
		case P_POST_DB: check(lib_post32_db(rc.ibv_qp, wr_writes), fn); break;
		case P_WR_DB: check(lib_post32_wr_db(qpx), fn); break;
		default: abort();
		}
		dt += now_ns() - t;
		retire_sq(&rc);
	}
	report(fn, dt, 32 * n);
}

static void run_recv(uint64_t n)
{
	uint64_t done = 0, i, chunk, max = rc.rq.max_post - 1;
	double dt = 0, t;

	while (done < n) {
		chunk = n - done < max ? n - done : max;
		t = now_ns();
		for (i = 0; i < chunk; i++)
			check(lib_recv(rc.ibv_qp, &wr_recv), "lib_recv");
		dt += now_ns() - t;
		done += chunk;
		retire_rq(&rc);
	}
	report("lib_recv", dt, n);
}

static void run_poll(const char *fn, unsigned per, uint64_t n)
{
	struct ibv_wc wc[32];
	uint64_t done = 0, polls, p;
	unsigned i, cqes;
	double dt = 0, t;

	while (done < n) {
		polls = CQ_ENTRIES / per;
		if (polls > n - done)
			polls = n - done;
		cqes = polls * per;
		for (i = 0; i < cqes; i++)
			device_cqe(cq.cons_index + i, (uint16_t)(rc.sq.cur_post + i));
		t = now_ns();
		for (p = 0; p < polls; p++) {
			int got = per == 1 ? lib_poll1(&cq.verbs_cq.cq, wc)
					   : lib_poll32(&cq.verbs_cq.cq, wc);
			if (got != (int)per || wc[0].status != IBV_WC_SUCCESS) {
				fprintf(stderr, "%s: polled %d\n", fn, got);
				exit(1);
			}
		}
		dt += now_ns() - t;
		done += polls;
	}
	/* The CQEs named WQEs that were never posted; put the send queue
	 * back to empty. */
	retire_sq(&rc);
	report(fn, dt, n * per);
}

static void hex(const char *what, const void *p, size_t len)
{
	const uint8_t *b = p;
	size_t i;

	printf("%s ", what);
	for (i = 0; i < len; i++)
		printf("%02x", b[i]);
	printf("\n");
}

/*
 * `--dump NAME`: from the fresh state, one operation of a scenario as the
 * measured function does it, then the memory it wrote, for compare.py to
 * check against the golden vector of the same work request (proof that
 * the hand-filled objects make the library do the real work):
 * post1 = rc_rdma_write_1sge_signaled, post1_wr = rc_wr_api_rdma_write,
 * inline60 = rc_send_inline_60, inline16_wr = rc_wr_api_send_inline_16,
 * ud = ud_send_ib, ud_wr = ud_wr_api_send_ib, recv = rc_recv_1sge.
 */
static int dump(const char *name)
{
	struct mlx5_qp *qp = &rc;
	int ret, recv = 0;

	if (!strcmp(name, "post1")) {
		ret = lib_post1(rc.ibv_qp, &wr_write);
	} else if (!strcmp(name, "post1_wr")) {
		ret = lib_post1_wr(&rc.verbs_qp.qp_ex, 7);
	} else if (!strcmp(name, "inline60")) {
		inline_sge.length = 60;
		ret = lib_inline64(rc.ibv_qp, &wr_inline);
	} else if (!strcmp(name, "inline16_wr")) {
		ret = lib_inline64_wr(&rc.verbs_qp.qp_ex, inline_data, 16);
	} else if (!strcmp(name, "ud")) {
		qp = &ud;
		ret = lib_ud(ud.ibv_qp, &wr_ud);
	} else if (!strcmp(name, "ud_wr")) {
		qp = &ud;
		ret = lib_ud_wr(&ud.verbs_qp.qp_ex, &ah.ibv_ah);
	} else if (!strcmp(name, "recv")) {
		recv = 1;
		ret = lib_recv(rc.ibv_qp, &wr_recv);
	} else {
		fprintf(stderr, "unknown dump %s\n", name);
		return 2;
	}
	printf("return %d\n", ret);
	if (recv) {
		hex("wqe", (uint8_t *)rc.buf.buf + rc.rq.offset, 1u << rc.rq.wqe_shift);
		hex("dbrec", &rc.db[MLX5_RCV_DBR], 4);
	} else {
		hex("wqe", qp->sq_start, 64 * (qp->sq.cur_post - 0));
		hex("dbrec", &qp->db[MLX5_SND_DBR], 4);
		hex("uar", (uint8_t *)qp->bf->uar + 0x800, 256);
	}
	return 0;
}

int main(int argc, char **argv)
{
	uint64_t n;

	doorbell_model_init();
	setup();
	make_wrs();
	if (argc == 3 && !strcmp(argv[1], "--dump"))
		return dump(argv[2]);
	n = argc > 1 ? strtoull(argv[1], NULL, 0) : 100000;

	if (wanted(argc, argv, "post1")) {
		run_single("lib_post1", P_POST, n);
		run_single("lib_post1_wr", P_WR, n);
	}
	if (wanted(argc, argv, "post32")) {
		run_batch("lib_post32", P_POST, n);
		run_batch("lib_post32_wr", P_WR, n);
	}
	if (wanted(argc, argv, "post1_db")) {
		run_single("lib_post1_db", P_POST_DB, n);
		run_single("lib_post1_wr_db", P_WR_DB, n);
	}
	if (wanted(argc, argv, "post32_db")) {
		run_batch("lib_post32_db", P_POST_DB, n);
		run_batch("lib_post32_wr_db", P_WR_DB, n);
	}
	if (wanted(argc, argv, "poll1"))
		run_poll("lib_poll1", 1, n);
	if (wanted(argc, argv, "poll32"))
		run_poll("lib_poll32", 32, n);
	if (wanted(argc, argv, "inline64")) {
		run_single("lib_inline64", P_INLINE, n);
		run_single("lib_inline64_wr", P_INLINE_WR, n);
	}
	if (wanted(argc, argv, "ud")) {
		run_single("lib_ud", P_UD, n);
		run_single("lib_ud_wr", P_UD_WR, n);
	}
	if (wanted(argc, argv, "recv"))
		run_recv(n);
	return 0;
}
