/*
 * rc_example: the flow of the RDMA_RC_example of Mellanox's "RDMA Aware
 * Networks Programming User Manual", written anew for this project, against
 * the public libibverbs API only (compiled with Debian's libibverbs-dev
 * headers, linked against whichever libibverbs.so.1 is found at run time).
 *
 *   server: rc_example -d DEV -g GIDX -p PORT
 *   client: rc_example -d DEV -g GIDX -p PORT SERVER_IP
 *
 * 1. Both sides open the device, allocate a PD, a CQ, a registered buffer
 *    and an RC QP, then exchange buffer address, rkey, QP number, LID and GID
 *    over TCP and bring the QP to RTS.
 * 2. The server SENDs "SEND operation" into the client's posted receive.
 * 3. The client RDMA READs the server's buffer ("RDMA read operation", which
 *    the server wrote before step 1's exchange) and checks it, then RDMA
 *    WRITEs "RDMA write operation" into the server's buffer.
 * 4. A TCP sync; the server checks its buffer holds the client's write.
 * Every check prints what was expected and what came; exit 0 only if all
 * passed. Teardown destroys every object in reverse order and checks each
 * return value.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MSG_SIZE 64
#define SEND_MSG "SEND operation"
#define READ_MSG "RDMA read operation"
#define WRITE_MSG "RDMA write operation"

struct wire_info {
	uint64_t addr;
	uint32_t rkey;
	uint32_t qp_num;
	uint16_t lid;
	uint8_t gid[16];
} __attribute__((packed));

static int die(const char *what, int err)
{
	fprintf(stderr, "rc_example: %s: %s\n", what, strerror(err));
	return 1;
}

static int tcp_connect(const char *host, int port, int *fd_out)
{
	int fd = -1;
	if (host) {
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
		if (inet_pton(AF_INET, host, &a.sin_addr) != 1)
			return EINVAL;
		for (int tries = 0; tries < 100; tries++) {
			fd = socket(AF_INET, SOCK_STREAM, 0);
			if (fd < 0)
				return errno;
			if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0)
				break;
			close(fd);
			fd = -1;
			usleep(100000);
		}
		if (fd < 0)
			return ECONNREFUSED;
	} else {
		int one = 1;
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port),
					 .sin_addr.s_addr = htonl(INADDR_ANY) };
		int l = socket(AF_INET, SOCK_STREAM, 0);
		if (l < 0)
			return errno;
		setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(l, (struct sockaddr *)&a, sizeof(a)) || listen(l, 1))
			return errno;
		fd = accept(l, NULL, NULL);
		close(l);
		if (fd < 0)
			return errno;
	}
	*fd_out = fd;
	return 0;
}

/* Sends ours, receives theirs (the same size both ways). */
static int exchange(int fd, const void *mine, void *theirs, size_t len)
{
	if (write(fd, mine, len) != (ssize_t)len)
		return EIO;
	size_t got = 0;
	while (got < len) {
		ssize_t r = read(fd, (char *)theirs + got, len - got);
		if (r <= 0)
			return EIO;
		got += r;
	}
	return 0;
}

static int wait_one(struct ibv_cq *cq, uint64_t wr_id, enum ibv_wc_opcode op)
{
	struct ibv_wc wc;
	int n;
	for (long spins = 0;; spins++) {
		n = ibv_poll_cq(cq, 1, &wc);
		if (n < 0) {
			fprintf(stderr, "rc_example: ibv_poll_cq failed\n");
			return 1;
		}
		if (n == 1)
			break;
		if (spins > 2000000000L) {
			fprintf(stderr, "rc_example: no completion\n");
			return 1;
		}
	}
	if (wc.status != IBV_WC_SUCCESS || wc.wr_id != wr_id || wc.opcode != op) {
		fprintf(stderr, "rc_example: completion wr_id %llu status %s opcode %d, wanted wr_id %llu opcode %d\n",
			(unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status), wc.opcode,
			(unsigned long long)wr_id, op);
		return 1;
	}
	return 0;
}

static int post(struct ibv_qp *qp, enum ibv_wr_opcode op, uint64_t wr_id, struct ibv_mr *mr,
		void *buf, uint32_t len, uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = len, .lkey = mr->lkey };
	struct ibv_send_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1, .opcode = op,
				  .send_flags = IBV_SEND_SIGNALED }, *bad = NULL;
	if (op != IBV_WR_SEND) {
		wr.wr.rdma.remote_addr = raddr;
		wr.wr.rdma.rkey = rkey;
	}
	int r = ibv_post_send(qp, &wr, &bad);
	if (r)
		return die("ibv_post_send", r);
	return 0;
}

static int check(const char *what, const char *got, const char *want)
{
	if (strcmp(got, want)) {
		fprintf(stderr, "rc_example: %s: got \"%.*s\", wanted \"%s\"\n", what, MSG_SIZE, got, want);
		return 1;
	}
	printf("%s: \"%s\"\n", what, got);
	return 0;
}

int main(int argc, char **argv)
{
	const char *dev_name = NULL, *server = NULL;
	int gidx = 0, port = 19875, opt, r, fails = 0;

	while ((opt = getopt(argc, argv, "d:g:p:")) != -1) {
		switch (opt) {
		case 'd': dev_name = optarg; break;
		case 'g': gidx = atoi(optarg); break;
		case 'p': port = atoi(optarg); break;
		default:
			fprintf(stderr, "usage: rc_example [-d dev] [-g gid_index] [-p port] [server]\n");
			return 2;
		}
	}
	if (optind < argc)
		server = argv[optind];

	int num;
	struct ibv_device **list = ibv_get_device_list(&num);
	if (!list)
		return die("ibv_get_device_list", errno);
	struct ibv_device *dev = NULL;
	for (int i = 0; i < num; i++)
		if (!dev_name || !strcmp(ibv_get_device_name(list[i]), dev_name))
			dev = list[i];
	if (!dev) {
		fprintf(stderr, "rc_example: device %s not found\n", dev_name ? dev_name : "(any)");
		return 1;
	}
	struct ibv_context *ctx = ibv_open_device(dev);
	if (!ctx)
		return die("ibv_open_device", errno);
	struct ibv_port_attr pa;
	if ((r = ibv_query_port(ctx, 1, &pa)))
		return die("ibv_query_port", r);
	union ibv_gid gid;
	if ((r = ibv_query_gid(ctx, 1, gidx, &gid)))
		return die("ibv_query_gid", r);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	if (!pd)
		return die("ibv_alloc_pd", errno);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!cq)
		return die("ibv_create_cq", errno);
	char *buf = calloc(1, MSG_SIZE);
	if (!buf)
		return die("calloc", ENOMEM);
	if (!server)
		strcpy(buf, READ_MSG);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, MSG_SIZE, IBV_ACCESS_LOCAL_WRITE |
				       IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE);
	if (!mr)
		return die("ibv_reg_mr", errno);
	struct ibv_qp_init_attr qia = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
					.cap = { .max_send_wr = 4, .max_recv_wr = 4,
						 .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp *qp = ibv_create_qp(pd, &qia);
	if (!qp)
		return die("ibv_create_qp", errno);

	int fd = -1;
	if ((r = tcp_connect(server, port, &fd)))
		return die("TCP connection", r);
	struct wire_info mine = { .addr = htobe64((uintptr_t)buf), .rkey = htonl(mr->rkey),
				  .qp_num = htonl(qp->qp_num), .lid = htons(pa.lid) }, theirs;
	memcpy(mine.gid, gid.raw, 16);
	if ((r = exchange(fd, &mine, &theirs, sizeof(mine))))
		return die("exchanging QP information", r);
	uint64_t raddr = be64toh(theirs.addr);
	uint32_t rkey = ntohl(theirs.rkey);

	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
						    IBV_ACCESS_REMOTE_WRITE };
	if ((r = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)))
		return die("modify to INIT", r);
	/* A receive for the server's SEND, before the peer can send. */
	if (server) {
		struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = MSG_SIZE, .lkey = mr->lkey };
		struct ibv_recv_wr rwr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 }, *bad;
		if ((r = ibv_post_recv(qp, &rwr, &bad)))
			return die("ibv_post_recv", r);
	}
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = ntohl(theirs.qp_num);
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.port_num = 1;
	a.ah_attr.dlid = ntohs(theirs.lid);
	if (pa.link_layer == IBV_LINK_LAYER_ETHERNET || gidx) {
		a.ah_attr.is_global = 1;
		memcpy(a.ah_attr.grh.dgid.raw, theirs.gid, 16);
		a.ah_attr.grh.sgid_index = gidx;
		a.ah_attr.grh.hop_limit = 1;
	}
	if ((r = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			       IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)))
		return die("modify to RTR", r);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	if ((r = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			       IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)))
		return die("modify to RTS", r);
	char sync = 'x', got_sync;
	if ((r = exchange(fd, &sync, &got_sync, 1)))
		return die("sync after RTS", r);

	if (!server) {
		/* The server: SEND, then wait for the client's READ and WRITE. */
		char *msg = buf + MSG_SIZE / 2;
		strcpy(msg, SEND_MSG);
		if (post(qp, IBV_WR_SEND, 2, mr, msg, sizeof(SEND_MSG), 0, 0) ||
		    wait_one(cq, 2, IBV_WC_SEND))
			return 1;
		if ((r = exchange(fd, &sync, &got_sync, 1)))
			return die("sync after the client's operations", r);
		fails += check("server buffer after the client's RDMA WRITE", buf, WRITE_MSG);
	} else {
		if (wait_one(cq, 1, IBV_WC_RECV))
			return 1;
		fails += check("client received", buf, SEND_MSG);
		memset(buf, 0, MSG_SIZE);
		if (post(qp, IBV_WR_RDMA_READ, 3, mr, buf, MSG_SIZE, raddr, rkey) ||
		    wait_one(cq, 3, IBV_WC_RDMA_READ))
			return 1;
		fails += check("client RDMA READ of the server's buffer", buf, READ_MSG);
		memset(buf, 0, MSG_SIZE);
		strcpy(buf, WRITE_MSG);
		if (post(qp, IBV_WR_RDMA_WRITE, 4, mr, buf, sizeof(WRITE_MSG), raddr, rkey) ||
		    wait_one(cq, 4, IBV_WC_RDMA_WRITE))
			return 1;
		if ((r = exchange(fd, &sync, &got_sync, 1)))
			return die("sync after the client's operations", r);
	}
	close(fd);

	if ((r = ibv_destroy_qp(qp)))
		return die("ibv_destroy_qp", r);
	if ((r = ibv_dereg_mr(mr)))
		return die("ibv_dereg_mr", r);
	free(buf);
	if ((r = ibv_destroy_cq(cq)))
		return die("ibv_destroy_cq", r);
	if ((r = ibv_dealloc_pd(pd)))
		return die("ibv_dealloc_pd", r);
	if ((r = ibv_close_device(ctx)))
		return die("ibv_close_device", r);
	ibv_free_device_list(list);
	if (fails)
		return 1;
	printf("%s: all checks passed\n", server ? "client" : "server");
	return 0;
}
