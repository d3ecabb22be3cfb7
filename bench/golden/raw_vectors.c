/*
 * Golden vectors for raw packet QPs (IBV_QPT_RAW_PACKET) from rdma-core's
 * own mlx5 provider: libmlx5.a + libibverbs.a built from source by run.sh
 * and driven through their usual entry points (ibv_post_send, the ibv_wr_*
 * builders, ibv_post_recv, ibv_poll_cq and the extended CQ's
 * ibv_start_poll / ibv_wc_read_*) on provider objects filled by hand, with
 * queues, doorbell records and the UAR page in ordinary memory. No device,
 * no kernel, no ibv_open_device. The method is the one of
 * data/prm/libmlx5-vectors.json: every vector runs twice from a fresh
 * state, run A over zeroed memory and run B over sentinel bytes (0xa5 in
 * queues and struct ibv_wc, 0x5a in the UAR page and doorbell records); a
 * byte that is the same in both runs was written by the library.
 *
 * Packet buffers live at a fixed address (PKT_BASE) so that the SGE
 * addresses, which the library copies into data segments, are the same
 * on every run and every machine.
 *
 * usage: raw_vectors COMMIT COMMIT_DATE BUILD_FLAGS > libmlx5-raw-vectors.json
 *
 * This file only includes rdma-core's headers from its source and build
 * trees; no rdma-core code is copied here.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <stdbool.h>
#include <endian.h>
#include <pthread.h>
#include <sys/mman.h>

#include "mlx5.h"
#include "wqe.h"

#define PKT_BASE 0x00007e5a00000000ull
#define PKT_SIZE 0x1000

#define SQ_WQEBBS 128
#define SQ_MAX_POST 64
#define SQ_MAX_GS 4
#define SQ_MAX_INLINE 76
/* raw_tso_qp: created with max_tso_header 64 (WQE 48 + 64 + 4 x 16 = 176
 * -> 192 B, 64 x 192 -> 16384 B = 256 WQEBBs, max_post 85, max_inline
 * 192 - 48 - 4 = 140) and the device's max_tso (256 KiB). */
#define TSO_WQEBBS 256
#define TSO_MAX_POST 85
#define TSO_MAX_INLINE 140
#define TSO_MAX_HEADER 64
#define TSO_MAX_PAYLOAD 262144
#define SQ_MAX_WQEBBS TSO_WQEBBS
#define RQ_ENTRIES 64
#define RQ_SHIFT 4
#define CQ_ENTRIES 256
#define RAW_QPN 0x000125
#define SQ_WRID_BASE 0x5241570000000000ull
#define RQ_WRID_BASE 0x5252000000000000ull

static struct mlx5_context *ctx;
static struct mlx5_cq cq;
static struct mlx5_qp qp;
static struct mlx5_bf bf;
static uint8_t *pkt;
static uint8_t *sq_mem, *rq_mem, *cq_mem;
static uint32_t *qp_db;
static unsigned sq_wqebbs = SQ_WQEBBS;
static uint32_t cq_dbrec[2] __attribute__((aligned(8)));

static void *zalloc(size_t n)
{
	void *p;

	if (posix_memalign(&p, 4096, n))
		abort();
	memset(p, 0, n);
	return p;
}

/* ---------------------------------------------------------------- JSON */

static int nfield;

static void hex(const uint8_t *b, size_t n)
{
	putchar('"');
	for (size_t i = 0; i < n; i++)
		printf("%02x", b[i]);
	putchar('"');
}

static void key(const char *k)
{
	printf("%s\"%s\": ", nfield++ ? ", " : "", k);
}

static void obj_begin(void) { putchar('{'); nfield = 0; }
static void obj_end(void) { putchar('}'); nfield = 1; }

static void kstr(const char *k, const char *v) { key(k); printf("\"%s\"", v); }
static void kint(const char *k, long long v) { key(k); printf("%lld", v); }
static void kbool(const char *k, bool v) { key(k); printf(v ? "true" : "false"); }
static void khex64(const char *k, uint64_t v) { key(k); printf("\"0x%016llx\"", (unsigned long long)v); }
static void khex32(const char *k, uint32_t v) { key(k); printf("\"0x%08x\"", v); }
static void khex(const char *k, uint64_t v) { key(k); printf("\"0x%llx\"", (unsigned long long)v); }
static void kbytes(const char *k, const uint8_t *b, size_t n) { key(k); hex(b, n); }

/*
 * Every vector is run twice (over different sentinels) and kept only if
 * both runs agree: ends the program naming it if they do not, else opens
 * its JSON object (after a comma unless it is the first) with its name
 * and description.
 */
static void vector_begin(bool agree, const char *name, const char *desc, bool first)
{
	if (!agree) {
		fprintf(stderr, "%s: runs disagree\n", name);
		exit(1);
	}
	printf("%s\n    ", first ? "" : ",");
	obj_begin();
	kstr("name", name);
	kstr("description", desc);
}

/* ------------------------------------------------------------ fixtures */

static void setup(void)
{
	struct ibv_qp_init_attr_ex attr;
	struct ibv_cq_init_attr_ex cq_attr;
	unsigned i;

	pkt = mmap((void *)PKT_BASE, PKT_SIZE, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (pkt != (void *)PKT_BASE) {
		perror("mmap packet buffers at PKT_BASE");
		exit(1);
	}

	ctx = calloc(1, sizeof(*ctx));
	pthread_mutex_init(&ctx->uidx_table_mutex, NULL);
	ctx->cqe_version = 1;
	ctx->prefer_bf = 0;
	ctx->shut_up_bf = 0;
	ctx->eth_min_inline_size = MLX5_ETH_L2_INLINE_HEADER_SIZE;
	ctx->ibv_ctx.context.ops.post_send = mlx5_post_send;
	ctx->ibv_ctx.context.ops.post_recv = mlx5_post_recv;
	ctx->ibv_ctx.context.ops.poll_cq = mlx5_poll_cq_v1;
	/* Five resources first, so raw_qp gets user index 5. */
	for (i = 0; i < 5; i++)
		mlx5_store_uidx(ctx, &cq);

	memset(&cq, 0, sizeof(cq));
	cq.verbs_cq.cq.context = &ctx->ibv_ctx.context;
	cq.verbs_cq.cq.cqe = CQ_ENTRIES - 1;
	cq_mem = zalloc(64 * CQ_ENTRIES);
	cq.buf_a.ibv_buf.addr = cq_mem;
	cq.buf_a.ibv_buf.size = 64 * CQ_ENTRIES;
	cq.active_buf = &cq.buf_a;
	cq.active_cqes = CQ_ENTRIES;
	cq.cqe_sz = 64;
	cq.cqn = 7;
	cq.dbrec = (__be32 *)cq_dbrec;
	cq.stall_enable = 0;
	cq.cached_opcode = -1;
	cq.flags = MLX5_CQ_FLAGS_SINGLE_THREADED | MLX5_CQ_FLAGS_EXTENDED;
	memset(&cq_attr, 0, sizeof(cq_attr));
	cq_attr.cqe = CQ_ENTRIES - 1;
	cq_attr.wc_flags = IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_CVLAN |
			   IBV_WC_EX_WITH_FLOW_TAG;
	if (mlx5_cq_fill_pfns(&cq, &cq_attr, ctx)) {
		fprintf(stderr, "mlx5_cq_fill_pfns failed\n");
		exit(1);
	}
	cq.verbs_cq.cq_ex.context = &ctx->ibv_ctx.context;

	memset(&qp, 0, sizeof(qp));
	qp.rsc.type = MLX5_RSC_TYPE_QP;
	qp.rsc.rsn = mlx5_store_uidx(ctx, &qp);
	if (qp.rsc.rsn != 5) {
		fprintf(stderr, "unexpected user index %u\n", qp.rsc.rsn);
		exit(1);
	}
	qp.ibv_qp = &qp.verbs_qp.qp;
	qp.ibv_qp->context = &ctx->ibv_ctx.context;
	qp.ibv_qp->qp_num = RAW_QPN;
	qp.ibv_qp->qp_type = IBV_QPT_RAW_PACKET;
	qp.ibv_qp->state = IBV_QPS_RTS;
	qp.ibv_qp->send_cq = &cq.verbs_cq.cq;
	qp.ibv_qp->recv_cq = &cq.verbs_cq.cq;

	/* A raw packet QP's send queue is a buffer of its own (mlx5_create_qp
	 * allocates sq_buf); the receive queue is at offset 0 of qp.buf. */
	rq_mem = zalloc(RQ_ENTRIES << RQ_SHIFT);
	qp.buf.ibv_buf.addr = rq_mem;
	qp.buf.ibv_buf.size = RQ_ENTRIES << RQ_SHIFT;
	qp.buf_size = RQ_ENTRIES << RQ_SHIFT;
	sq_mem = zalloc(SQ_MAX_WQEBBS * 64);
	qp.sq_buf.ibv_buf.addr = sq_mem;
	qp.sq_buf.ibv_buf.size = SQ_WQEBBS * 64;
	qp.sq_buf_size = SQ_WQEBBS * 64;
	qp.sq_start = sq_mem;
	qp.max_inline_data = SQ_MAX_INLINE;

	qp.sq.wqe_cnt = SQ_WQEBBS;
	qp.sq.wqe_shift = 6;
	qp.sq.max_post = SQ_MAX_POST;
	qp.sq.max_gs = SQ_MAX_GS;
	qp.sq.qp_state_max_gs = SQ_MAX_GS;
	qp.sq.offset = 0;
	qp.sq.qend = sq_mem + SQ_WQEBBS * 64;
	qp.sq.wrid = calloc(SQ_MAX_WQEBBS, sizeof(uint64_t));
	qp.sq.wqe_head = calloc(SQ_MAX_WQEBBS, sizeof(unsigned));
	qp.sq.wr_data = calloc(SQ_MAX_WQEBBS, sizeof(uint32_t));

	qp.rq.wqe_cnt = RQ_ENTRIES;
	qp.rq.wqe_shift = RQ_SHIFT;
	qp.rq.max_post = RQ_ENTRIES;
	qp.rq.max_gs = 1;
	qp.rq.qp_state_max_gs = 1;
	qp.rq.offset = 0;
	qp.rq.wrid = calloc(RQ_ENTRIES, sizeof(uint64_t));

	qp_db = zalloc(4096);
	qp.db = (__be32 *)qp_db;

	memset(&bf, 0, sizeof(bf));
	bf.uar = zalloc(4096);
	bf.reg = (uint8_t *)bf.uar + 0x800;
	bf.buf_size = 256;
	bf.uuarn = 1;
	bf.need_lock = 0;
	qp.bf = &bf;

	memset(&attr, 0, sizeof(attr));
	attr.qp_type = IBV_QPT_RAW_PACKET;
	attr.comp_mask = IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	attr.send_ops_flags = IBV_QP_EX_WITH_SEND;
	if (mlx5_qp_fill_wr_pfns(&qp, &attr, NULL)) {
		fprintf(stderr, "mlx5_qp_fill_wr_pfns failed\n");
		exit(1);
	}
	qp.verbs_qp.comp_mask |= VERBS_QP_EX;
}

/* The packet buffers: a 60-byte IPv4/UDP frame at +0 and byte patterns
 * at +0x100, +0x200, +0x300. */
static const uint8_t FRAME[60] = {
	0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01,
	0x08, 0x00,
	0x45, 0x00, 0x00, 0x2e, 0x00, 0x01, 0x00, 0x00, 0x40, 0x11, 0x00, 0x00,
	0xc0, 0xa8, 0x01, 0x01, 0xc0, 0xa8, 0x01, 0x02,
	0x04, 0xd2, 0x16, 0x2e, 0x00, 0x1a, 0x00, 0x00,
	0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b,
	0x0c, 0x0d, 0x0e, 0x0f, 0x10, 0x11,
};

static void fill_packets(void)
{
	memset(pkt, 0, PKT_SIZE);
	memcpy(pkt, FRAME, sizeof(FRAME));
	for (unsigned i = 0; i < 0x300; i++)
		pkt[0x100 + i] = (uint8_t)(0x80 + i);
	/* TSO headers at +0x800: the frame's Ethernet and IPv4 headers, then a
	 * TCP header and options (pattern bytes). */
	memcpy(pkt + 0x800, FRAME, 34);
	pkt[0x800 + 23] = 0x06;
	for (unsigned i = 34; i < 80; i++)
		pkt[0x800 + i] = (uint8_t)(0x40 + i);
}

/* Resets the queues to a fresh state with every byte `q` (queues) or `d`
 * (doorbell records, UAR page). */
static void reset_tso(uint8_t q, uint8_t d, unsigned sq_start, unsigned rq_start,
		      uint32_t eth_min_inline, uint32_t cap_cache, enum ibv_qp_state state,
		      bool tso)
{
	unsigned i;

	/* raw_qp, or raw_tso_qp (the same QP created with max_tso_header). */
	sq_wqebbs = tso ? TSO_WQEBBS : SQ_WQEBBS;
	qp.sq.wqe_cnt = sq_wqebbs;
	qp.sq.max_post = tso ? TSO_MAX_POST : SQ_MAX_POST;
	qp.sq.qend = sq_mem + sq_wqebbs * 64;
	qp.sq_buf.ibv_buf.size = sq_wqebbs * 64;
	qp.sq_buf_size = sq_wqebbs * 64;
	qp.max_inline_data = tso ? TSO_MAX_INLINE : SQ_MAX_INLINE;
	qp.max_tso_header = tso ? TSO_MAX_HEADER : 0;
	qp.max_tso = tso ? TSO_MAX_PAYLOAD : 0;
	fill_packets();
	memset(sq_mem, q, SQ_MAX_WQEBBS * 64);
	memset(rq_mem, q, RQ_ENTRIES << RQ_SHIFT);
	memset(qp_db, d, 8);
	memset(bf.uar, d, 4096);
	bf.offset = 0;
	qp.sq.cur_post = sq_start;
	qp.sq.head = sq_start;
	qp.sq.tail = sq_start;
	qp.rq.head = rq_start;
	qp.rq.tail = rq_start;
	qp.fm_cache = 0;
	qp.sq_signal_bits = 0;
	qp.ibv_qp->state = state;
	qp.qp_cap_cache = cap_cache;
	ctx->eth_min_inline_size = eth_min_inline;
	for (i = 0; i < sq_wqebbs; i++) {
		qp.sq.wrid[i] = SQ_WRID_BASE + i;
		qp.sq.wqe_head[i] = i;
		qp.sq.wr_data[i] = 0;
	}
	for (i = 0; i < RQ_ENTRIES; i++)
		qp.rq.wrid[i] = RQ_WRID_BASE + i;
}

static void reset(uint8_t q, uint8_t d, unsigned sq_start, unsigned rq_start,
		  uint32_t eth_min_inline, uint32_t cap_cache, enum ibv_qp_state state)
{
	reset_tso(q, d, sq_start, rq_start, eth_min_inline, cap_cache, state, false);
}

#define CAPS_ETH (MLX5_CSUM_SUPPORT_RAW_OVER_ETH | MLX5_RX_CSUM_VALID)

/* ---------------------------------------------------------------- send */

struct snap {
	int ret;
	int bad;
	unsigned cur_post, head;
	uint8_t sq[SQ_MAX_WQEBBS * 64];
	uint8_t db[8];
	uint8_t uar[4096];
	unsigned bf_offset;
	uint64_t wrid[SQ_MAX_WQEBBS];
};

static struct snap sa, sb;

struct sge_in {
	uint64_t off; /* from PKT_BASE */
	uint32_t len;
	uint32_t lkey;
};

struct wr_in {
	uint64_t wr_id;
	unsigned flags;
	int n;
	struct sge_in sg[SQ_MAX_GS];
};

enum api { POST_SEND, WR_SGE, WR_SGE_LIST, WR_INLINE, WR_INLINE_LIST };

struct send_vec {
	const char *name, *desc;
	enum api api;
	uint32_t min_inline;
	unsigned start;
	int nwr;
	struct wr_in wr[2];
	bool no_csum_cap; /* QP without MLX5_CSUM_SUPPORT_RAW_OVER_ETH */
	uint16_t mss; /* non-zero: IBV_WR_TSO on raw_tso_qp */
	uint16_t hdr_off, hdr_sz; /* the TSO header in the packet buffers */
};

static void post(const struct send_vec *v, struct snap *s, uint8_t q, uint8_t d)
{
	struct ibv_send_wr wrs[2], *bad = NULL;
	struct ibv_sge sges[2][SQ_MAX_GS];
	struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(qp.ibv_qp);
	int i, j;

	reset_tso(q, d, v->start, 0, v->min_inline, v->no_csum_cap ? 0 : CAPS_ETH, IBV_QPS_RTS,
		  v->mss != 0);
	memset(wrs, 0, sizeof(wrs));
	for (i = 0; i < v->nwr; i++) {
		for (j = 0; j < v->wr[i].n; j++) {
			sges[i][j].addr = PKT_BASE + v->wr[i].sg[j].off;
			sges[i][j].length = v->wr[i].sg[j].len;
			sges[i][j].lkey = v->wr[i].sg[j].lkey;
		}
		wrs[i].wr_id = v->wr[i].wr_id;
		wrs[i].opcode = v->mss ? IBV_WR_TSO : IBV_WR_SEND;
		if (v->mss) {
			wrs[i].tso.hdr = pkt + v->hdr_off;
			wrs[i].tso.hdr_sz = v->hdr_sz;
			wrs[i].tso.mss = v->mss;
		}
		wrs[i].send_flags = v->wr[i].flags;
		wrs[i].num_sge = v->wr[i].n;
		wrs[i].sg_list = sges[i];
		wrs[i].next = i + 1 < v->nwr ? &wrs[i + 1] : NULL;
	}
	s->bad = -1;
	if (v->api == POST_SEND) {
		s->ret = ibv_post_send(qp.ibv_qp, wrs, &bad);
		if (bad)
			s->bad = bad - wrs;
	} else {
		const struct wr_in *w = &v->wr[0];
		struct ibv_data_buf bufs[SQ_MAX_GS];

		for (j = 0; j < w->n; j++) {
			bufs[j].addr = (void *)(uintptr_t)(PKT_BASE + w->sg[j].off);
			bufs[j].length = w->sg[j].len;
		}
		ibv_wr_start(qx);
		qx->wr_id = w->wr_id;
		qx->wr_flags = w->flags;
		ibv_wr_send(qx);
		switch (v->api) {
		case WR_SGE:
			ibv_wr_set_sge(qx, w->sg[0].lkey, PKT_BASE + w->sg[0].off, w->sg[0].len);
			break;
		case WR_SGE_LIST:
			ibv_wr_set_sge_list(qx, w->n, sges[0]);
			break;
		case WR_INLINE:
			ibv_wr_set_inline_data(qx, bufs[0].addr, bufs[0].length);
			break;
		case WR_INLINE_LIST:
			ibv_wr_set_inline_data_list(qx, w->n, bufs);
			break;
		default:
			abort();
		}
		s->ret = ibv_wr_complete(qx);
	}
	s->cur_post = qp.sq.cur_post;
	s->head = qp.sq.head;
	memcpy(s->sq, sq_mem, sizeof(s->sq));
	memcpy(s->db, qp_db, 8);
	memcpy(s->uar, bf.uar, 4096);
	s->bf_offset = bf.offset;
	memcpy(s->wrid, qp.sq.wrid, sizeof(s->wrid));
}

static const char *flag_names[] = {
	[0] = "IBV_SEND_FENCE", [1] = "IBV_SEND_SIGNALED", [2] = "IBV_SEND_SOLICITED",
	[3] = "IBV_SEND_INLINE", [4] = "IBV_SEND_IP_CSUM",
};

static void flags_out(const char *k, unsigned f)
{
	int n = 0;

	key(k);
	putchar('[');
	for (int b = 0; b < 5; b++)
		if (f & (1u << b))
			printf("%s\"%s\"", n++ ? ", " : "", flag_names[b]);
	putchar(']');
}

static void sge_out(const struct sge_in *g)
{
	obj_begin();
	khex64("addr", PKT_BASE + g->off);
	kint("length", g->len);
	khex32("lkey", g->lkey);
	kbytes("data", pkt + g->off, g->len);
	obj_end();
}

static void sgl_out(const char *k, const struct wr_in *w)
{
	key(k);
	putchar('[');
	for (int j = 0; j < w->n; j++) {
		if (j)
			printf(", ");
		sge_out(&w->sg[j]);
	}
	putchar(']');
}

static void emit_send(const struct send_vec *v, bool first)
{
	int i;

	post(v, &sa, 0x00, 0x00);
	post(v, &sb, 0xa5, 0x5a);
	fill_packets();
	vector_begin(sa.ret == sb.ret && sa.cur_post == sb.cur_post && sa.head == sb.head,
		     v->name, v->desc, first);
	kstr("api", v->api == POST_SEND ? "ibv_post_send" : "ibv_wr_*");
	kstr("qp", v->mss ? "raw_tso_qp" : "raw_qp");
	kint("eth_min_inline_size", v->min_inline);
	key("state_before");
	obj_begin();
	kint("sq_cur_post", v->start);
	kint("sq_head", v->start);
	kint("sq_tail", v->start);
	khex("bf_offset", 0);
	kstr("qp_state", "IBV_QPS_RTS");
	kbool("csum_cap", !v->no_csum_cap);
	obj_end();
	if (v->api == POST_SEND) {
		key("wrs");
		putchar('[');
		for (i = 0; i < v->nwr; i++) {
			if (i)
				printf(", ");
			obj_begin();
			khex64("wr_id", v->wr[i].wr_id);
			kstr("opcode", v->mss ? "IBV_WR_TSO" : "IBV_WR_SEND");
			if (v->mss) {
				key("tso");
				obj_begin();
				kbytes("hdr", pkt + v->hdr_off, v->hdr_sz);
				kint("hdr_sz", v->hdr_sz);
				kint("mss", v->mss);
				obj_end();
			}
			flags_out("send_flags", v->wr[i].flags);
			kint("num_sge", v->wr[i].n);
			sgl_out("sg_list", &v->wr[i]);
			obj_end();
		}
		putchar(']');
	} else {
		const struct wr_in *w = &v->wr[0];

		key("calls");
		printf("[{\"fn\": \"ibv_wr_start\"}, ");
		obj_begin();
		kstr("fn", "ibv_wr_send");
		khex64("qp_ex.wr_id", w->wr_id);
		flags_out("qp_ex.wr_flags", w->flags);
		obj_end();
		printf(", ");
		obj_begin();
		switch (v->api) {
		case WR_SGE:
			kstr("fn", "ibv_wr_set_sge");
			khex32("lkey", w->sg[0].lkey);
			khex64("addr", PKT_BASE + w->sg[0].off);
			kint("length", w->sg[0].len);
			kbytes("data", pkt + w->sg[0].off, w->sg[0].len);
			break;
		case WR_SGE_LIST:
			kstr("fn", "ibv_wr_set_sge_list");
			kint("num_sge", w->n);
			sgl_out("sg_list", w);
			break;
		case WR_INLINE:
			kstr("fn", "ibv_wr_set_inline_data");
			kbytes("data", pkt + w->sg[0].off, w->sg[0].len);
			break;
		case WR_INLINE_LIST:
			kstr("fn", "ibv_wr_set_inline_data_list");
			key("buf_list");
			putchar('[');
			for (i = 0; i < w->n; i++) {
				printf(i ? ", " : "");
				obj_begin();
				kbytes("data", pkt + w->sg[i].off, w->sg[i].len);
				obj_end();
			}
			putchar(']');
			break;
		default:
			abort();
		}
		obj_end();
		printf(", {\"fn\": \"ibv_wr_complete\"}]");
	}

	key("result");
	obj_begin();
	kint("return", sa.ret);
	if (sa.ret) {
		kstr("return_name", sa.ret == EINVAL ? "EINVAL" : sa.ret == ENOMEM ? "ENOMEM" : "?");
		if (sa.bad >= 0)
			kint("bad_wr", sa.bad);
	}
	kint("sq_cur_post_after", sa.cur_post);
	kint("sq_head_after", sa.head);
	/* The WQEs, found by following each control segment's DS count. */
	key("wqes");
	putchar('[');
	static bool covered[SQ_MAX_WQEBBS];
	memset(covered, 0, sizeof(covered));
	{
		unsigned idx = v->start, nw = sa.head - v->start;

		for (unsigned k = 0; k < nw; k++) {
			unsigned slot = idx & (sq_wqebbs - 1);
			uint8_t *ctrl = sa.sq + 64 * slot;
			unsigned ds = ctrl[7] & 0x3f;
			unsigned cnt = (ds * 16 + 63) / 64;
			uint8_t bytes[64 * 16], mask[64 * 16];

			for (unsigned b = 0; b < cnt; b++) {
				unsigned s = (slot + b) & (sq_wqebbs - 1);

				covered[s] = true;
				memcpy(bytes + 64 * b, sa.sq + 64 * s, 64);
				for (unsigned x = 0; x < 64; x++)
					mask[64 * b + x] = sa.sq[64 * s + x] == sb.sq[64 * s + x] ? 0xff : 0;
			}
			printf(k ? ", " : "");
			obj_begin();
			kint("first_slot", slot);
			kint("wqebb_count", cnt);
			key("slots");
			putchar('[');
			for (unsigned b = 0; b < cnt; b++)
				printf("%s%u", b ? ", " : "", (slot + b) & (sq_wqebbs - 1));
			putchar(']');
			kbytes("bytes", bytes, 64 * cnt);
			kbytes("written_mask", mask, 64 * cnt);
			kint("ds", ds);
			khex("wqe_index", (uint32_t)be32toh(*(uint32_t *)ctrl) >> 8 & 0xffff);
			khex64("sq_wrid_at_first_slot", sa.wrid[slot]);
			obj_end();
			idx += cnt;
		}
	}
	putchar(']');
	/* Send queue blocks outside every WQE that the library wrote. */
	key("sq_written_outside_wqes");
	putchar('[');
	{
		int k = 0;

		for (unsigned sl = 0; sl < sq_wqebbs; sl++) {
			uint8_t mask[64];
			bool any = false;

			if (covered[sl])
				continue;
			for (unsigned x = 0; x < 64; x++) {
				mask[x] = sa.sq[64 * sl + x] == sb.sq[64 * sl + x] ? 0xff : 0;
				any |= mask[x] != 0;
			}
			if (!any)
				continue;
			printf(k++ ? ", " : "");
			obj_begin();
			kint("slot", sl);
			kbytes("bytes", sa.sq + 64 * sl, 64);
			kbytes("written_mask", mask, 64);
			obj_end();
		}
	}
	putchar(']');
	key("doorbell_record");
	obj_begin();
	kbytes("sq_dbrec_bytes", sa.db + 4, 4);
	kbool("sq_dbrec_written", !memcmp(sa.db + 4, sb.db + 4, 4));
	kbool("rq_dbrec_written", !memcmp(sa.db, sb.db, 4));
	obj_end();
	{
		int lo = -1, hi = -1;

		/* Written: the same in both runs, or (a BlueFlame copy of
		 * stale ring bytes) not the sentinel in run B. */
		for (int x = 0; x < 4096; x++)
			if (sa.uar[x] == sb.uar[x] || sb.uar[x] != 0x5a) {
				if (lo < 0)
					lo = x;
				hi = x;
			}
		key("doorbell_register");
		if (lo < 0) {
			printf("null");
		} else {
			obj_begin();
			khex("uar_page_offset", lo);
			kint("length", hi - lo + 1);
			kstr("kind", hi - lo + 1 == 8 ? "doorbell" : "blueflame");
			kbytes("bytes", sa.uar + lo, hi - lo + 1);
			khex("bf_offset_after", sa.bf_offset);
			obj_end();
		}
	}
	obj_end();
	obj_end();
}

#define SIG IBV_SEND_SIGNALED
#define LK 0x00abcd01

static const struct send_vec SENDS[] = {
	{ "raw_send_l2_1sge", "SEND, one SGE holding the whole 60-byte frame; the first 18 bytes go inline (eth_min_inline_size 18, vport min inline mode L2)",
	  POST_SEND, 18, 0, 1, { { 7, SIG, 1, { { 0, 60, LK } } } } },
	{ "raw_send_l2_ip_csum", "as raw_send_l2_1sge with IBV_SEND_IP_CSUM (cs_flags L3 | L4)",
	  POST_SEND, 18, 0, 1, { { 7, SIG | IBV_SEND_IP_CSUM, 1, { { 0, 60, LK } } } } },
	{ "raw_send_l2_unsignaled", "as raw_send_l2_1sge, not signaled",
	  POST_SEND, 18, 0, 1, { { 7, 0, 1, { { 0, 60, LK } } } } },
	{ "raw_send_l2_hdr_across_sges", "the 18 inline header bytes gathered from SGE 0 (10 bytes) and SGE 1 (8 of its 20); data segments for the rest of SGE 1 and for SGE 2",
	  POST_SEND, 18, 0, 1, { { 7, SIG, 3, { { 0, 10, LK }, { 10, 20, LK + 1 }, { 0x100, 100, LK + 2 } } } } },
	{ "raw_send_l2_hdr_exact_sge", "SGE 0 is exactly the 18 header bytes: no data segment for it",
	  POST_SEND, 18, 0, 1, { { 7, SIG, 2, { { 0, 18, LK }, { 18, 42, LK + 1 } } } } },
	{ "raw_send_none_1sge", "eth_min_inline_size 0 (vport min inline mode none): no inline headers, the whole SGE in a data segment",
	  POST_SEND, 0, 0, 1, { { 7, SIG, 1, { { 0, 60, LK } } } } },
	{ "raw_send_none_ip_csum_3sge", "min inline none, IBV_SEND_IP_CSUM, three SGEs",
	  POST_SEND, 0, 0, 1, { { 7, SIG | IBV_SEND_IP_CSUM, 3, { { 0, 60, LK }, { 0x100, 100, LK + 1 }, { 0x200, 64, LK + 2 } } } } },
	{ "raw_send_l2_4sge_wrap_at_127", "sq_cur_post 127 (last WQEBB): ctrl + Ethernet segment + 4 data segments, the data segments wrap into slot 0",
	  POST_SEND, 18, 127, 1, { { 7, SIG, 4, { { 0, 60, LK }, { 0x100, 100, LK + 1 }, { 0x200, 64, LK + 2 }, { 0x300, 32, LK + 3 } } } } },
	{ "raw_send_l2_inline", "IBV_SEND_INLINE: 18 header bytes in the Ethernet segment, the other 42 in an inline segment; BlueFlame copy",
	  POST_SEND, 18, 0, 1, { { 7, SIG | IBV_SEND_INLINE, 1, { { 0, 60, LK } } } } },
	{ "raw_send_none_inline_ip_csum", "min inline none, IBV_SEND_INLINE | IBV_SEND_IP_CSUM: all 60 bytes in the inline segment",
	  POST_SEND, 0, 0, 1, { { 7, SIG | IBV_SEND_INLINE | IBV_SEND_IP_CSUM, 1, { { 0, 60, LK } } } } },
	{ "raw_send_chain_2wr", "two SENDs in one call (0x201 unsignaled, 0x202 signaled): one doorbell for the last",
	  POST_SEND, 18, 0, 2, { { 0x201, 0, 1, { { 0, 60, LK } } }, { 0x202, SIG | IBV_SEND_IP_CSUM, 2, { { 0, 60, LK }, { 0x100, 100, LK + 1 } } } } },
	{ "raw_send_l2_index_wrap_at_0xffff", "sq_cur_post 0xffff: the WQE index wraps, doorbell record 0",
	  POST_SEND, 18, 0xffff, 1, { { 7, SIG, 1, { { 0, 60, LK } } } } },
	{ "raw_send_l2_header_too_short", "one SGE of 10 bytes, fewer than the 18 inline header bytes: EINVAL, nothing posted",
	  POST_SEND, 18, 0, 1, { { 7, SIG, 1, { { 0, 10, LK } } } } },
	{ "raw_send_ip_csum_no_cap", "IBV_SEND_IP_CSUM on a QP without MLX5_CSUM_SUPPORT_RAW_OVER_ETH (device without IBV_DEVICE_RAW_IP_CSUM): EINVAL, nothing posted",
	  POST_SEND, 18, 0, 1, { { 7, SIG | IBV_SEND_IP_CSUM, 1, { { 0, 60, LK } } } }, true },
	{ "raw_tso_hdr54_ip_csum", "IBV_WR_TSO on raw_tso_qp: a 54-byte Ethernet/IPv4/TCP header inline in the Ethernet segment, mss 1448, IBV_SEND_IP_CSUM, 300 payload bytes",
	  POST_SEND, 18, 0, 1, { { 7, SIG | IBV_SEND_IP_CSUM, 1, { { 0x100, 300, LK } } } }, false, 1448, 0x800, 54 },
	{ "raw_tso_hdr14", "IBV_WR_TSO with the shortest header (14 bytes, below eth_min_inline_size), two payload SGEs",
	  POST_SEND, 18, 0, 1, { { 7, SIG, 2, { { 0x100, 100, LK }, { 0x200, 200, LK + 1 } } } }, false, 536, 0x800, 14 },
	{ "raw_tso_hdr64_wrap_at_255", "IBV_WR_TSO from the last WQEBB (255) with the largest header (64 bytes): the inline header wraps to the start of the queue. The provider then writes the data segments 32 bytes too far, into slot 1 outside the WQE (set_tso_eth_seg moves seg to the queue start and mlx5_post_send adds sizeof(struct mlx5_wqe_eth_seg) again), and leaves the WQE's units 2-3 of slot 0 unwritten: see sq_written_outside_wqes",
	  POST_SEND, 18, 255, 1, { { 7, SIG | IBV_SEND_IP_CSUM, 2, { { 0x100, 100, LK }, { 0x200, 200, LK + 1 } } } }, false, 1448, 0x800, 64 },
	{ "raw_tso_header_too_long", "IBV_WR_TSO with a 65-byte header, one more than max_tso_header: EINVAL, nothing posted",
	  POST_SEND, 18, 0, 1, { { 7, SIG, 1, { { 0x100, 300, LK } } } }, false, 1448, 0x800, 65 },
	{ "raw_wr_api_send_sge", "raw_send_l2_1sge through ibv_wr_send + ibv_wr_set_sge",
	  WR_SGE, 18, 0, 1, { { 7, SIG, 1, { { 0, 60, LK } } } } },
	{ "raw_wr_api_send_sge_list_ip_csum", "ibv_wr_set_sge_list with the header across SGEs 0 and 1, IBV_SEND_IP_CSUM",
	  WR_SGE_LIST, 18, 0, 1, { { 7, SIG | IBV_SEND_IP_CSUM, 3, { { 0, 10, LK }, { 10, 20, LK + 1 }, { 0x100, 100, LK + 2 } } } } },
	{ "raw_wr_api_inline_data", "ibv_wr_set_inline_data of the 60-byte frame: headers from the buffer, the rest inline",
	  WR_INLINE, 18, 0, 1, { { 7, SIG, 1, { { 0, 60, 0 } } } } },
	{ "raw_wr_api_inline_data_list", "ibv_wr_set_inline_data_list of two buffers (14 + 46 bytes): the 18 header bytes span both",
	  WR_INLINE_LIST, 18, 0, 1, { { 7, SIG, 2, { { 0, 14, 0 }, { 14, 46, 0 } } } } },
	{ "raw_wr_api_send_sge_none", "ibv_wr_set_sge with min inline none",
	  WR_SGE, 0, 0, 1, { { 7, SIG, 1, { { 0, 60, LK } } } } },
};

/* ---------------------------------------------------------------- recv */

struct recv_vec {
	const char *name, *desc;
	enum ibv_qp_state state;
	unsigned head;
	int nwr;
	struct { uint64_t wr_id; struct sge_in sg; } wr[2];
};

static const struct recv_vec RECVS[] = {
	{ "raw_recv_1sge_rts", "one receive in RTS: the receive doorbell record is updated", IBV_QPS_RTS, 0, 1,
	  { { 0x11, { 0x100, 1536, 0x00abcd09 } } } },
	{ "raw_recv_1sge_init", "one receive before RTR (INIT): a raw packet QP leaves the receive doorbell record alone", IBV_QPS_INIT, 0, 1,
	  { { 0x11, { 0x100, 1536, 0x00abcd09 } } } },
	{ "raw_recv_chain_2wr_wrap", "two receives from rq_head 0xffff: slots 63 and 0, doorbell record 1", IBV_QPS_RTS, 0xffff, 2,
	  { { 0x21, { 0x100, 1536, 0x00abcd09 } }, { 0x22, { 0x700, 2048, 0x00abcd0a } } } },
};

static void emit_recv(const struct recv_vec *v, bool first)
{
	static uint8_t ra[RQ_ENTRIES << RQ_SHIFT], rb[RQ_ENTRIES << RQ_SHIFT], da[8], db[8];
	struct ibv_recv_wr wrs[2], *bad;
	struct ibv_sge sges[2];
	int ret[2];
	unsigned head_after = 0;

	for (int run = 0; run < 2; run++) {
		reset(run ? 0xa5 : 0, run ? 0x5a : 0, 0, v->head, 18, CAPS_ETH, v->state);
		memset(wrs, 0, sizeof(wrs));
		for (int i = 0; i < v->nwr; i++) {
			sges[i].addr = PKT_BASE + v->wr[i].sg.off;
			sges[i].length = v->wr[i].sg.len;
			sges[i].lkey = v->wr[i].sg.lkey;
			wrs[i].wr_id = v->wr[i].wr_id;
			wrs[i].sg_list = &sges[i];
			wrs[i].num_sge = 1;
			wrs[i].next = i + 1 < v->nwr ? &wrs[i + 1] : NULL;
		}
		ret[run] = ibv_post_recv(qp.ibv_qp, wrs, &bad);
		memcpy(run ? rb : ra, rq_mem, sizeof(ra));
		memcpy(run ? db : da, qp_db, 8);
		head_after = qp.rq.head;
	}
	vector_begin(ret[0] == ret[1], v->name, v->desc, first);
	kstr("qp", "raw_qp");
	key("state_before");
	obj_begin();
	kint("rq_head", v->head);
	kstr("qp_state", v->state == IBV_QPS_RTS ? "IBV_QPS_RTS" : "IBV_QPS_INIT");
	obj_end();
	key("wrs");
	putchar('[');
	for (int i = 0; i < v->nwr; i++) {
		printf(i ? ", " : "");
		obj_begin();
		khex64("wr_id", v->wr[i].wr_id);
		key("sg_list");
		putchar('[');
		obj_begin();
		khex64("addr", PKT_BASE + v->wr[i].sg.off);
		kint("length", v->wr[i].sg.len);
		khex32("lkey", v->wr[i].sg.lkey);
		obj_end();
		putchar(']');
		obj_end();
	}
	putchar(']');
	key("result");
	obj_begin();
	kint("return", ret[0]);
	kint("rq_head_after", head_after);
	key("wqes");
	putchar('[');
	for (int i = 0; i < v->nwr; i++) {
		unsigned slot = (v->head + i) & (RQ_ENTRIES - 1);
		unsigned off = slot << RQ_SHIFT;
		uint8_t mask[1 << RQ_SHIFT];

		for (int x = 0; x < (1 << RQ_SHIFT); x++)
			mask[x] = ra[off + x] == rb[off + x] ? 0xff : 0;
		printf(i ? ", " : "");
		obj_begin();
		kint("slot", slot);
		kint("stride", 1 << RQ_SHIFT);
		kint("buffer_offset", off);
		kbytes("bytes", ra + off, 1 << RQ_SHIFT);
		kbytes("written_mask", mask, 1 << RQ_SHIFT);
		khex64("rq_wrid_at_slot", qp.rq.wrid[slot]);
		obj_end();
	}
	putchar(']');
	key("doorbell_record");
	obj_begin();
	kbytes("rq_dbrec_bytes", da, 4);
	kbool("rq_dbrec_written", !memcmp(da, db, 4));
	kbool("sq_dbrec_written", !memcmp(da + 4, db + 4, 4));
	obj_end();
	obj_end();
	obj_end();
}

/* ---------------------------------------------------------------- CQEs */

struct cqe_in {
	int slot;
	uint8_t opcode;
	uint32_t sop_drop_qpn; /* host order, opcode in 31:24 */
	uint16_t wqe_counter;
	uint32_t byte_cnt;
	uint8_t hds_ip_ext, l4_hdr_type_etc;
	uint16_t vlan_info;
	uint32_t rss_hash_result;
	uint8_t rss_hash_type;
	uint16_t check_sum;
	uint8_t syndrome, vendor_err_synd;
};

struct cqe_vec {
	const char *name, *desc;
	uint32_t cap_cache;
	unsigned cons_index;
	int ne, n;
	struct cqe_in c[2];
	unsigned rq_start; /* receive counter of the first outstanding receive */
};

static void build_cqe(const struct cqe_in *c, unsigned cons_index, uint8_t *out)
{
	uint32_t v;

	memset(out, 0, 64);
	if (c->opcode == MLX5_CQE_REQ_ERR || c->opcode == MLX5_CQE_RESP_ERR) {
		out[0x36] = c->vendor_err_synd;
		out[0x37] = c->syndrome;
	} else {
		v = htobe32(c->rss_hash_result);
		memcpy(out + 0x0c, &v, 4);
		out[0x10] = c->rss_hash_type;
		out[0x14] = c->check_sum >> 8;
		out[0x15] = c->check_sum & 0xff;
		out[0x1c] = c->hds_ip_ext;
		out[0x1d] = c->l4_hdr_type_etc;
		out[0x1e] = c->vlan_info >> 8;
		out[0x1f] = c->vlan_info & 0xff;
		v = htobe32(c->byte_cnt);
		memcpy(out + 0x2c, &v, 4);
	}
	v = htobe32(5); /* user index of raw_qp */
	memcpy(out + 0x20, &v, 4);
	v = htobe32(c->sop_drop_qpn);
	memcpy(out + 0x38, &v, 4);
	out[0x3c] = c->wqe_counter >> 8;
	out[0x3d] = c->wqe_counter & 0xff;
	/* Owner bit of the pass the CQE belongs to. */
	out[0x3f] = c->opcode << 4 | (((cons_index + (unsigned)c->slot - (cons_index & (CQ_ENTRIES - 1))) / CQ_ENTRIES) & 1);
}

static void cq_reset(const struct cqe_vec *v, uint8_t q, uint8_t d)
{
	reset(q, d, 0, 0, 18, v->cap_cache, IBV_QPS_RTS);
	for (unsigned i = 0; i < CQ_ENTRIES; i++) {
		memset(cq_mem + 64 * i, 0, 64);
		cq_mem[64 * i + 63] = 0xf0;
	}
	for (int i = 0; i < v->n; i++)
		build_cqe(&v->c[i], v->cons_index, cq_mem + 64 * v->c[i].slot);
	memset(cq_dbrec, d, 8);
	cq.cons_index = v->cons_index;
	cq.cur_rsc = NULL;
	cq.cur_srq = NULL;
	cq.flags &= MLX5_CQ_FLAGS_SINGLE_THREADED | MLX5_CQ_FLAGS_EXTENDED;
	/* Outstanding work: 16 send WQEs and 16 receives. */
	qp.sq.head = 16;
	qp.sq.cur_post = 16;
	qp.rq.head = v->rq_start + 16;
	qp.rq.tail = v->rq_start;
}

#define RQ_OK (1 << 0)
#define L3OK (1 << 1)
#define L4OK (1 << 2)
#define T(l4, l3, vlan) ((l4) << 4 | (l3) << 2 | (vlan))

static const struct cqe_vec CQES[] = {
	{ "raw_recv_ipv4_udp_csum_ok", "IPv4/UDP, L2/L3/L4 OK: IBV_WC_IP_CSUM_OK", CAPS_ETH, 0, 1, 1,
	  { { 0, MLX5_CQE_RESP_SEND, 0, 0, 60, RQ_OK | L3OK | L4OK, T(2, 2, 0), 0, 0, 0, 0xbeef } } },
	{ "raw_recv_ipv4_tcp_csum_ok", "IPv4/TCP (ACK with data), L3/L4 OK", CAPS_ETH, 0, 1, 1,
	  { { 0, MLX5_CQE_RESP_SEND, 0, 0, 74, RQ_OK | L3OK | L4OK, T(4, 2, 0), 0, 0, 0, 0 } } },
	{ "raw_recv_ipv4_l4_bad", "IPv4/UDP, L4 checksum bad: no IBV_WC_IP_CSUM_OK", CAPS_ETH, 0, 1, 1,
	  { { 0, MLX5_CQE_RESP_SEND, 0, 0, 60, RQ_OK | L3OK, T(2, 2, 0), 0, 0, 0, 0 } } },
	{ "raw_recv_ipv4_l3_bad", "IPv4/TCP, L3 checksum bad", CAPS_ETH, 0, 1, 1,
	  { { 0, MLX5_CQE_RESP_SEND, 0, 0, 60, RQ_OK | L4OK, T(1, 2, 0), 0, 0, 0, 0 } } },
	{ "raw_recv_ipv6_udp", "IPv6/UDP with L3/L4 OK: IBV_WC_IP_CSUM_OK is for IPv4 only", CAPS_ETH, 0, 1, 1,
	  { { 0, MLX5_CQE_RESP_SEND, 0, 0, 80, RQ_OK | L3OK | L4OK, T(2, 1, 0), 0, 0, 0, 0 } } },
	{ "raw_recv_non_ip", "no L3 header (ARP)", CAPS_ETH, 0, 1, 1,
	  { { 0, MLX5_CQE_RESP_SEND, 0, 0, 60, RQ_OK, T(0, 0, 0), 0, 0, 0, 0 } } },
	{ "raw_recv_cvlan_stripped", "customer VLAN stripped: present bit, vlan_info 0x6064 (ibv_wc_read_cvlan)", CAPS_ETH, 0, 1, 1,
	  { { 0, MLX5_CQE_RESP_SEND, 0, 0, 60, RQ_OK | L3OK | L4OK, T(2, 2, 1), 0x6064, 0, 0, 0 } } },
	{ "raw_recv_flow_tag", "flow tag 0xabcdef in sop_drop_qpn (ibv_wc_read_flow_tag; ibv_poll_cq reports it as qp_num)", CAPS_ETH, 0, 1, 1,
	  { { 0, MLX5_CQE_RESP_SEND, 0x00abcdef, 0, 60, RQ_OK | L3OK | L4OK, T(2, 2, 0), 0, 0, 0, 0 } } },
	{ "raw_recv_rss_hash", "RSS hash 0x9e3779b9, hash type 0x2c, flow tag 0x000125", CAPS_ETH, 0, 1, 1,
	  { { 0, MLX5_CQE_RESP_SEND, RAW_QPN, 0, 128, RQ_OK | L3OK | L4OK, T(1, 2, 0), 0, 0x9e3779b9, 0x2c, 0x1234 } } },
	{ "raw_recv_no_rx_csum_cap", "QP without MLX5_RX_CSUM_VALID (device without IBV_DEVICE_RAW_IP_CSUM): no IBV_WC_IP_CSUM_OK", 0, 0, 1, 1,
	  { { 0, MLX5_CQE_RESP_SEND, 0, 0, 60, RQ_OK | L3OK | L4OK, T(2, 2, 0), 0, 0, 0, 0 } } },
	{ "raw_recv_counter_masked", "receive counters 0x1040..0x104f outstanding; wqe_counter 0x1043 takes receive slot 3", CAPS_ETH, 0, 1, 1,
	  { { 0, MLX5_CQE_RESP_SEND, 0, 0x1043, 60, RQ_OK | L3OK | L4OK, T(2, 2, 0), 0, 0, 0, 0 } }, 0x1040 },
	{ "raw_req_send", "requester completion of a raw SEND (WQE opcode 0x0a, QPN 0x125)", CAPS_ETH, 0, 1, 1,
	  { { 0, MLX5_CQE_REQ, 0x0a000000 | RAW_QPN, 0, 0, 0, 0, 0, 0, 0, 0 } } },
	{ "raw_resp_err_flush", "responder error, syndrome 0x05 (flushed), vendor 0xf9", CAPS_ETH, 0, 1, 1,
	  { { 0, MLX5_CQE_RESP_ERR, RAW_QPN, 0, 0, 0, 0, 0, 0, 0, 0, 0x05, 0xf9 } } },
	{ "raw_two_recv_ne4", "two receive CQEs polled with ne 4", CAPS_ETH, 0, 4, 2,
	  { { 0, MLX5_CQE_RESP_SEND, 0x000007, 0, 60, RQ_OK | L3OK | L4OK, T(2, 2, 1), 0x0005, 0x01020304, 0x0f, 0 },
	    { 1, MLX5_CQE_RESP_SEND, 0x000008, 1, 90, RQ_OK | L3OK | L4OK, T(3, 1, 0), 0, 0x05060708, 0x0f, 0 } } },
	{ "raw_recv_second_pass", "cons_index 256: owner bit 1 is software's", CAPS_ETH, 256, 1, 1,
	  { { 0, MLX5_CQE_RESP_SEND, 0, 0, 60, RQ_OK | L3OK | L4OK, T(2, 2, 0), 0, 0, 0, 0 } } },
};

struct wc_snap {
	int ret;
	struct ibv_wc wc[4];
	unsigned ci;
	uint8_t dbrec[8];
	unsigned sq_tail, rq_tail;
};

static const char *opcode_name(int op)
{
	switch (op) {
	case IBV_WC_SEND: return "IBV_WC_SEND";
	case IBV_WC_RECV: return "IBV_WC_RECV";
	case IBV_WC_RECV_RDMA_WITH_IMM: return "IBV_WC_RECV_RDMA_WITH_IMM";
	default: return "?";
	}
}

static void emit_cqe(const struct cqe_vec *v, bool first)
{
	static struct wc_snap a, b;
	uint8_t img[64];

	for (int run = 0; run < 2; run++) {
		struct wc_snap *s = run ? &b : &a;

		cq_reset(v, 0, 0);
		memset(s->wc, run ? 0xa5 : 0, sizeof(s->wc));
		memset(cq_dbrec, run ? 0x5a : 0, 8);
		s->ret = ibv_poll_cq(&cq.verbs_cq.cq, v->ne, s->wc);
		s->ci = cq.cons_index;
		memcpy(s->dbrec, cq_dbrec, 8);
		s->sq_tail = qp.sq.tail;
		s->rq_tail = qp.rq.tail;
	}
	vector_begin(a.ret == b.ret, v->name, v->desc, first);
	kstr("qp", "raw_qp");
	key("state_before");
	obj_begin();
	kint("cq_cons_index", v->cons_index);
	kint("sq_head", 16);
	kint("sq_tail", 0);
	kint("rq_head", v->rq_start + 16);
	kint("rq_tail", v->rq_start);
	kbool("rx_csum_valid", v->cap_cache & MLX5_RX_CSUM_VALID);
	obj_end();
	key("cqes");
	putchar('[');
	for (int i = 0; i < v->n; i++) {
		const struct cqe_in *c = &v->c[i];

		build_cqe(c, v->cons_index, img);
		printf(i ? ", " : "");
		obj_begin();
		kint("slot", c->slot);
		key("fields");
		obj_begin();
		kint("opcode", c->opcode);
		kint("owner", img[63] & 1);
		khex32("sop_drop_qpn", c->sop_drop_qpn);
		khex("wqe_counter", c->wqe_counter);
		khex32("srqn_uidx", 5);
		if (c->opcode == MLX5_CQE_REQ_ERR || c->opcode == MLX5_CQE_RESP_ERR) {
			khex("syndrome", c->syndrome);
			khex("vendor_err_synd", c->vendor_err_synd);
		} else {
			kint("byte_cnt", c->byte_cnt);
			khex("hds_ip_ext", c->hds_ip_ext);
			khex("l4_hdr_type_etc", c->l4_hdr_type_etc);
			khex("vlan_info", c->vlan_info);
			khex32("rss_hash_result", c->rss_hash_result);
			khex("rss_hash_type", c->rss_hash_type);
			khex("check_sum", c->check_sum);
		}
		obj_end();
		kbytes("bytes", img, 64);
		obj_end();
	}
	putchar(']');

	key("poll");
	obj_begin();
	kint("ne", v->ne);
	kint("return", a.ret);
	key("wc");
	putchar('[');
	for (int i = 0; i < a.ret; i++) {
		struct ibv_wc *w = &a.wc[i], *x = &b.wc[i];
		const char *nw[16];
		int n = 0;

#define SAME(f) (memcmp(&w->f, &x->f, sizeof(w->f)) == 0)
		printf(i ? ", " : "");
		obj_begin();
		if (SAME(wr_id)) khex64("wr_id", w->wr_id); else nw[n++] = "wr_id";
		if (SAME(status)) {
			kint("status", w->status);
			kstr("status_str", ibv_wc_status_str(w->status));
		} else nw[n++] = "status";
		if (SAME(opcode)) {
			kint("opcode", w->opcode);
			kstr("opcode_name", opcode_name(w->opcode));
		} else nw[n++] = "opcode";
		if (SAME(vendor_err)) khex("vendor_err", w->vendor_err); else nw[n++] = "vendor_err";
		if (SAME(byte_len)) kint("byte_len", w->byte_len); else nw[n++] = "byte_len";
		if (SAME(imm_data)) kbytes("imm_data", (uint8_t *)&w->imm_data, 4); else nw[n++] = "imm_data";
		if (SAME(qp_num)) khex("qp_num", w->qp_num); else nw[n++] = "qp_num";
		if (SAME(src_qp)) khex("src_qp", w->src_qp); else nw[n++] = "src_qp";
		if (SAME(wc_flags)) khex("wc_flags", w->wc_flags); else nw[n++] = "wc_flags";
		if (SAME(pkey_index)) kint("pkey_index", w->pkey_index); else nw[n++] = "pkey_index";
		if (SAME(slid)) khex("slid", w->slid); else nw[n++] = "slid";
		if (SAME(sl)) kint("sl", w->sl); else nw[n++] = "sl";
		if (SAME(dlid_path_bits)) kint("dlid_path_bits", w->dlid_path_bits); else nw[n++] = "dlid_path_bits";
#undef SAME
		key("not_written");
		putchar('[');
		for (int k = 0; k < n; k++)
			printf("%s\"%s\"", k ? ", " : "", nw[k]);
		putchar(']');
		obj_end();
	}
	putchar(']');
	obj_end();
	key("result");
	obj_begin();
	kint("cq_cons_index_after", a.ci);
	kbytes("cq_dbrec_ci_bytes", a.dbrec, 4);
	kbool("cq_dbrec_ci_written", !memcmp(a.dbrec, b.dbrec, 4));
	kbool("cq_dbrec_arm_written", !memcmp(a.dbrec + 4, b.dbrec + 4, 4));
	kint("sq_tail_after", a.sq_tail);
	kint("rq_tail_after", a.rq_tail);
	obj_end();

	/* The same CQEs through the extended CQ. */
	{
		struct ibv_cq_ex *cx = &cq.verbs_cq.cq_ex;
		struct ibv_poll_cq_attr pa = { 0 };
		int ret, k = 0;

		cq_reset(v, 0, 0);
		key("ex_poll");
		obj_begin();
		ret = ibv_start_poll(cx, &pa);
		kint("start_poll_return", ret);
		key("entries");
		putchar('[');
		while (ret == 0 && k < v->ne) {
			printf(k ? ", " : "");
			obj_begin();
			khex64("wr_id", cx->wr_id);
			kint("status", cx->status);
			if (cx->status == IBV_WC_SUCCESS) {
				kint("opcode", ibv_wc_read_opcode(cx));
				kint("byte_len", ibv_wc_read_byte_len(cx));
			}
			khex("vendor_err", ibv_wc_read_vendor_err(cx));
			khex("qp_num", ibv_wc_read_qp_num(cx));
			khex("wc_flags", ibv_wc_read_wc_flags(cx));
			if (cx->status == IBV_WC_SUCCESS) {
				khex("cvlan", ibv_wc_read_cvlan(cx));
				khex("flow_tag", ibv_wc_read_flow_tag(cx));
			}
			obj_end();
			k++;
			if (k < v->ne)
				ret = ibv_next_poll(cx);
		}
		putchar(']');
		if (k > 0 || ret == 0)
			ibv_end_poll(cx);
		kint("polled", k);
		kint("cq_cons_index_after", cq.cons_index);
		kbytes("cq_dbrec_ci_bytes", (uint8_t *)cq_dbrec, 4);
		obj_end();
	}
	obj_end();
}

int main(int argc, char **argv)
{
	size_t i;

	if (argc != 4) {
		fprintf(stderr, "usage: %s COMMIT COMMIT_DATE BUILD_FLAGS\n", argv[0]);
		return 2;
	}
	setup();
	printf("{\n  \"format\": \"libmlx5-raw-golden-vectors\",\n  \"format_version\": 1,\n");
	printf("  \"generator\": ");
	obj_begin();
	kstr("library", "rdma-core providers/mlx5 (libmlx5.a) + libibverbs.a, built statically");
	kstr("rdma_core_commit", argv[1]);
	kstr("rdma_core_commit_date", argv[2]);
	kstr("build", argv[3]);
	kstr("program", "bench/golden/raw_vectors.c, built and run by bench/golden/run.sh");
	kstr("host", "x86_64, little-endian");
	key("library_functions_exercised");
	printf("[\"mlx5_post_send (via ibv_post_send, IBV_WR_SEND and IBV_WR_TSO)\", \"mlx5_qp_fill_wr_pfns + ibv_wr_start/ibv_wr_send/ibv_wr_set_sge/ibv_wr_set_sge_list/ibv_wr_set_inline_data/ibv_wr_set_inline_data_list/ibv_wr_complete\", \"mlx5_post_recv (via ibv_post_recv)\", \"mlx5_poll_cq_v1 (via ibv_poll_cq)\", \"mlx5_cq_fill_pfns + ibv_start_poll/ibv_next_poll/ibv_end_poll/ibv_wc_read_*\", \"mlx5_store_uidx\"]");
	kstr("method", "every vector runs twice from a fresh state: run A over zeroed queues, doorbell records, UAR page and ibv_wc; run B over 0xa5 (queues, ibv_wc) and 0x5a (UAR page, doorbell records). Bytes equal in both runs were written by the library; reported values are run A's.");
	key("not_in_the_provider");
	printf("[\"VLAN insertion on send: rdma-core's mlx5_wqe_eth_seg (mlx5dv.h) has no insert field and mlx5_post_send sets none for IBV_QPT_RAW_PACKET; there is no ibv_send_flags bit for it, so no vector can come from the provider\", "
	       "\"inline header sizes other than 0 and 18 for SEND: mlx5.c sets eth_min_inline_size to 0 for vport min inline mode NONE and to MLX5_ETH_L2_INLINE_HEADER_SIZE (18) for every other mode (L2, IP, TCP/UDP), so larger header lists are only inlined by TSO (IBV_WR_TSO), whose vectors are here (raw_tso_*)\", "
	       "\"the RSS hash result and type, the L3/L4 header types and check_sum are not reported through ibv_wc or ibv_wc_read_*: the CQE bytes are the vector, and IBV_WC_IP_CSUM_OK is what the provider derives from them\"]");
	obj_end();
	printf(",\n  \"conventions\": {\"bytes\": \"hex strings in memory order (device view; multi-byte device fields big-endian)\", \"written_mask\": \"ff = written by the library, 00 = left as it was\", \"hex_numbers\": \"strings 0x... are host-order values\", \"not_written\": \"ibv_wc fields the library did not store\", \"data\": \"the bytes at an SGE's address when the library ran (packet buffers at a fixed address)\"},\n");
	printf("  \"fixtures\": ");
	obj_begin();
	key("raw_qp");
	obj_begin();
	kstr("qp_type", "IBV_QPT_RAW_PACKET");
	khex("qpn", RAW_QPN);
	kint("user_index", 5);
	key("cap");
	printf("{\"max_send_wr\": 64, \"max_recv_wr\": 64, \"max_send_sge\": 4, \"max_recv_sge\": 1, \"max_inline_data\": 0}");
	kint("sq_wqebbs", SQ_WQEBBS);
	kint("sq_max_post", SQ_MAX_POST);
	kint("sq_max_gs", SQ_MAX_GS);
	kint("max_inline_data", SQ_MAX_INLINE);
	kint("rq_entries", RQ_ENTRIES);
	kint("rq_log_stride", RQ_SHIFT);
	kint("rq_max_gs", 1);
	kstr("sizing", "rdma-core verbs.c rules: SQ overhead ctrl 16 + eth segment 32 = 48, WQE 48 + 4 x 16 = 112 -> 128 B (2 WQEBBs), 64 x 128 B = 8192 B = 128 WQEBBs, max_post 64, max_inline 128 - 48 - 4 = 76; RQ 64 x 16 B");
	kstr("qp_cap_cache", "MLX5_CSUM_SUPPORT_RAW_OVER_ETH | MLX5_RX_CSUM_VALID (what modify_qp sets for a raw packet QP on an Ethernet port of a device with IBV_DEVICE_RAW_IP_CSUM) unless a vector says otherwise");
	khex64("sq_wrid_base", SQ_WRID_BASE);
	khex64("rq_wrid_base", RQ_WRID_BASE);
	kstr("bf", "dedicated BlueFlame register at UAR page offset 0x800, buf_size 256, no lock");
	khex64("packet_buffers", PKT_BASE);
	obj_end();
	key("raw_tso_qp");
	obj_begin();
	kstr("same_as", "raw_qp, created with max_tso_header 64 (IBV_QP_INIT_ATTR_MAX_TSO_HEADER) and the device's max_tso");
	kint("max_tso_header", TSO_MAX_HEADER);
	kint("max_tso", TSO_MAX_PAYLOAD);
	kint("sq_wqebbs", TSO_WQEBBS);
	kint("sq_max_post", TSO_MAX_POST);
	kint("max_inline_data", TSO_MAX_INLINE);
	kstr("sizing", "rdma-core verbs.c rules: 48 + align(64, 16) + 4 x 16 = 176 -> 192 B (3 WQEBBs), 64 x 192 B -> 16384 B = 256 WQEBBs, max_post 85, max_inline 192 - 48 - 4 = 140");
	obj_end();
	key("cq0");
	printf("{\"entries\": 256, \"cqn\": 7, \"cqe_size\": 64, \"cqe_version\": 1, \"extended_cq_wc_flags\": \"IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_CVLAN | IBV_WC_EX_WITH_FLOW_TAG\", \"single_threaded\": true}");
	obj_end();
	printf(",\n  \"send\": [");
	for (i = 0; i < sizeof(SENDS) / sizeof(SENDS[0]); i++)
		emit_send(&SENDS[i], i == 0);
	printf("\n  ],\n  \"recv\": [");
	for (i = 0; i < sizeof(RECVS) / sizeof(RECVS[0]); i++)
		emit_recv(&RECVS[i], i == 0);
	printf("\n  ],\n  \"cqe\": [");
	for (i = 0; i < sizeof(CQES) / sizeof(CQES[0]); i++)
		emit_cqe(&CQES[i], i == 0);
	printf("\n  ],\n  \"counts\": {\"send\": %zu, \"recv\": %zu, \"cqe\": %zu}\n}\n",
	       sizeof(SENDS) / sizeof(SENDS[0]), sizeof(RECVS) / sizeof(RECVS[0]),
	       sizeof(CQES) / sizeof(CQES[0]));
	return 0;
}
