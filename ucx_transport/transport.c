/* transport.c: messages between ranks over UCP active messages (see
 * transport.h).
 *
 * Wire: one UCP active message (AM id TD_AM_ID) per message. Its AM header
 * is our header
 *   u8 version | u8 flags(0) | u16 handler id | u32 src rank |
 *   u32 user header length | u32 number of bodies | 16-byte job tag |
 *   number-of-bodies x { u64 length | u8 memory type | 7 zero bytes } |
 *   user header
 * and its data are the bodies back to back (contiguous for one body, an IOV
 * for several), so one rendezvous moves all of them into the receiver's
 * buffers.
 *
 * Job tag: HMAC-SHA256(TODIST_JOB_TOKEN, "todist-am-v2" | be32 src |
 * be32 dst), first 16 bytes, precomputed per peer at creation. A receiver
 * checks it in constant time after the frame's structure and before any
 * handler or rendezvous sees it; a wrong tag is dropped and counted
 * (td__transport_rejected). It keeps processes that do not know the token
 * from injecting messages; it is not encryption, and someone who can read
 * the traffic can copy a tag (no integrity or replay protection).
 *
 * Progress token: one thread at a time may call into the UCX worker (it is
 * created SERIALIZED): the holder of tp->token. The progress thread takes
 * it for each round of progress; a thread waiting for a reply may take it
 * instead and drive progress itself (td__transport_drive), which saves the
 * two thread hand-offs of a round trip; a sending thread that finds it
 * free sends directly. While a driver is active the progress thread naps,
 * so the two never compete for a core. Callbacks run on the holder.
 *  N1 The nap (NAP_US) doubles, up to NAP_MAX_US, when more than one
 *     drive began during it (short calls following each other: a loop of
 *     small collectives or RPCs), and is NAP_US again otherwise (one long
 *     wait, a driver that computes between waits: a pipeline stage, whose
 *     in-place offers the progress thread reads meanwhile, C17). Each
 *     wake-up takes the core of a rank's polling thread where there is no
 *     spare one: 5-10% of 8 B all_reduces across two emulated hosts took
 *     30-50 us (bench/RESULTS.md). A driver that gives up its wait
 *     signals the nap, so only drivers that left with their replies leave
 *     the progress thread napping on, for at most NAP_MAX_US.
 *  N2 Where no thread ever sleeps on the worker's event fd (busy
 *     progress, cores not scarce, more than one core: tp->wakeup 0), the
 *     context is made without UCP_FEATURE_WAKEUP and the worker has no
 *     event fd (efd -1); nothing arms it or signals it (worker_signal).
 *     With the feature every interface's event fd sits in the worker's
 *     epoll set, and each arriving packet runs that chain inside its
 *     sender's system call: 8 B across two emulated hosts, Open MPI given
 *     the feature lost 1-2% (bench/RESULTS.md). Decided once, before the
 *     context, from the mode (choose_mode) and the cores: driver_sleep
 *     (scarce or one core) and the blocking progress thread are the only
 *     sleepers on the fd.
 *  N3 A driver that leaves with its reply bumps drive_left (the token
 *     holder's plain store, no clock); the progress thread reads the
 *     clock when it first sees the change, and naps on while that is
 *     less than RECENT_NS ago (a caller between two calls is back at
 *     once). One that gave up marks the count (bit 0): no nap for it.
 *     The driver read the clock at every leave before: about 25 ns of a
 *     9 us call across two emulated hosts.
 *
 * Liveness between hosts (L1..L13). UCX notices a peer whose process died
 * (its connection closes) but not one cut off by the network: TCP keeps
 * retransmitting for minutes. So:
 *  L1 A peer on another host (params.same_host says so when it is
 *     connected) is watched; peers of this host are not (their death
 *     closes the shared memory and sockets at once).
 *  L2 Every message from a watched peer, of any kind, counts as a sign of
 *     life (a counter bumped on receipt; the clock is read only at ticks,
 *     every LIVE_TICK_NS at most, by the token holder).
 *  L3 A watched peer quiet for a third of TODIST_LIVENESS (default 3 s) is
 *     pinged (handler id LIVE_ID, transport-internal, not counted in the
 *     join's sums), again every third: its token holder answers at once,
 *     whatever its application threads do. Quiet for all of it (L6), and
 *     its host silent too (L7), the peer is failed as if UCX had reported
 *     it (ep_fail): pending sends fail, peer_failed runs, its later sends
 *     fail at once.
 *  L4 Ticks run from progress_once: after every wake-up of a sleeping
 *     progress thread and every 16th round otherwise, so a tick is never
 *     more than about 100 ms late (the sleeper's poll timeout).
 *  L5 Peers of this host: UCX misses one that died before the wire-up of
 *     our endpoint to it completed (a first send waits forever), so every
 *     TD_TRANSPORT_LIVENESS_S the token holder asks params.peer_gone (the
 *     runtime: its pid, runtime/liveness.h) about each peer it made or
 *     tried an endpoint to, and fails a gone one (ep_fail; peers_liveness;
 *     every 256th round, and after every wake-up of the sleeper).
 *  L6 Silence is measured on a watched clock, which each tick advances by
 *     the time since the previous one but by at most a sixth of
 *     TODIST_LIVENESS: a rank whose ticks stopped (its process stopped or
 *     starved of the CPU, its token holder held up in a callback) did not
 *     watch, and does not fail on waking a peer it could not hear. A peer
 *     is failed only once its last ping had a third of TODIST_LIVENESS,
 *     watched, to come back. On a machine where ranks went 3 s without
 *     the CPU, peers were failed by a waking rank that had never pinged
 *     them (issue 30).
 *  L7 Before failing a silent peer its host is asked for (params.
 *     peer_heard: the kernel's TCP counters of this process's connections
 *     to the addresses that host published, runtime/liveness.h V4). One
 *     heard within half of TODIST_LIVENESS (at least 1.5 s: L8's probes
 *     come a second apart; at most all of it) acknowledged our pings: the
 *     host is reachable and only its process does not answer (stopped,
 *     starved, busy), so the peer is not failed, only logged once (info)
 *     and watched on. A cut-off host acknowledges nothing: failed as in
 *     L3, at most about TODIST_LIVENESS + its half after the cut. A live
 *     peer that never answers again (hung) is left to the callers'
 *     timeouts; one that died closes its connections (UCX reports it).
 *  L8 The host is made to answer: when a quiet peer gets its first ping,
 *     params.peer_heard is asked at once too, which turns on the kernel's
 *     TCP keepalive (idle 1 s) on this process's connections to that
 *     host (liveness.h V6), so a live host's kernel acknowledges a probe
 *     every second or so by the time L7 asks, whatever its process does.
 *     Before, nothing crossed a connection whose UCX wire-up waited for a
 *     stopped or starved peer (our pings wait behind the wire-up), L7
 *     found only the connect's acknowledgement, seconds old, and a live
 *     rank was failed (issue 30: test_spank_hosts in CI, rank 2 failed a
 *     live rank 0 after 3.0 s; tests/hosts/test_hosts_dropped.sh).
 *  L9 A ping is answered from the receive callback without making an
 *     endpoint (the pinger's reply endpoint serves when we have none):
 *     making one there calls the resolver, whose store round trips (and
 *     a lock held across them by a thread fetching an address) stopped
 *     all of a rank's progress for its peers' whole timeout under load.
 *  L10 A send completed with a plain transport error to a peer not yet
 *     failed is asked about as a failed connect is (L5's check, waiting
 *     up to PEER_GONE_WAIT_MS for a peer of this host) before it is
 *     reported: UCX may see a dying peer's endpoint break before its
 *     process reads as exited, and the caller must learn TD_ERR_PEER
 *     naming the rank (CI: test_coll early_kill_fails_naming_it).
 *  L11 The token holder never waits for the store: it never calls the
 *     resolver (params.resolve). A peer's address is fetched by the
 *     resolver thread (resolver_main, started at the first need), one at
 *     a time, with no lock of ours held across the fetch (res_lock guards
 *     the answer only). Where the holder needs an endpoint it has not
 *     got (peer_ready): a send parks on tp->parked_head, after that
 *     peer's earlier parked sends, and every later send to that peer
 *     parks behind them (order per sender; a parked peer has no
 *     endpoint, or one still wiring up (L13), so S2 never passes them);
 *     a watch (td__transport_watch)
 *     waits likewise; an offer (O2) is answered "later" (ANS_LATER,
 *     through the offer's reply endpoint: sent again through UCX,
 *     offered again next time; as after a refusal (O2), that message may
 *     then arrive after the sender's later ones: a cost of a first large
 *     message from a peer of this host this rank never sent to); another
 *     internal message to it is not
 *     sent (pings and wake-ups go only to peers with an endpoint). Each
 *     fetch's end, its address or its error, sets tp->addr_news and
 *     signals the worker; the next round restarts the parked sends in
 *     order (addr_arrived), which connect or fail with the resolver's
 *     error as before. Before, a send posted by a callback, an RPC's
 *     reply, a watch or an offer's answer fetched on the holder: one slow
 *     store answer (rank 0's store answered after tens of seconds under
 *     load) stopped all of a rank's progress, and its peers' collectives
 *     timed out (issue 30, test_spank_hosts 17/18 under load).
 *     Shutdown cancels what is parked; a revive forgets the address
 *     (a fetch begun before it is dropped, addr_gen).
 *  L12 A peer this rank dropped (L3: silent, its host too) is told so.
 *     Its endpoint is not closed but kept (linger_ep), unused: no send,
 *     wire-up or reconnect of ours goes to that peer until a revive (R1),
 *     as for any failed peer. Every message from it is refused
 *     (not delivered, counted as dropped) and answered "you were dropped"
 *     (LIVE_ID 'D' | be32 ms silent | be32 TODIST_LIVENESS ms), at most
 *     TELL_MAX times, through that endpoint (else the message's reply
 *     endpoint, as L9), never in answer to a 'D'. After a partition that
 *     heals, our pings sent into it arrive, the peer answers them, and
 *     the answer brings the 'D'. A rank told so fails that peer right
 *     after that round's UCX progress (told_fail: not inside the receive
 *     callback, whose message may have come through the endpoint it
 *     closes), the reason kept (fate, td__transport_peer_fate): its
 *     pending and later calls involving it fail with TD_ERR_PEER saying
 *     "rank 0 dropped this rank: it heard nothing from it for 3.0 s
 *     (TODIST_LIVENESS=3)", not that it died, and peer_failed hears it
 *     with WHY TD_ERR_STATE, not TD_ERR_PEER (that peer lives on: this
 *     rank is the one cut off; runtime/elastic EL12); a 'D' from a peer
 *     already failed (each dropped the other, or it died) is ignored, as
 *     is a malformed one. The kept endpoint is closed by force once UCX
 *     reports it failed (the told peer closed its side, or died), by a
 *     revive and at shutdown. Only an endpoint with nothing of ours in
 *     UCX (inflight 0), and none of its bodies (L14), is kept: a send
 *     still in it must fail now (a
 *     collective waits for its sends' completions, C4), so such an
 *     endpoint is closed by force as before and its peer, if it comes
 *     back, is told only if its messages reach us again through UCX (a
 *     new endpoint UCX makes for them: the reply endpoint), else it sees
 *     the connection close (TD_ERR_PEER, "died"). Keeping the
 *     endpoint also spares the dropped rank UCX 1.13's abort: a wire-up
 *     request of its still reaching us finds the endpoint it was meant
 *     for (L13 makes sure that any endpoint such a request can still
 *     reach is one of those kept).
 *  L13 An endpoint to a watched peer (L1) is wiring up from its making
 *     (peer_connect) until a message of ours on it that needs the
 *     peer's endpoint id completed: a probe (LIVE_ID 'H', reply-flagged,
 *     ignored by the receiver) sent as it is made (wire_probe,
 *     probe_sent_cb; one done at once proves it; one refused at once,
 *     or no memory for it, leaves the endpoint as before L13, and UCX
 *     reports a failed one). Until then our sends to that peer park
 *     (tp->parked_head, after its earlier parked ones, as L11's; S2
 *     passes none) and are started in order the round after
 *     (addr_arrived); a peer failed meanwhile fails them the same way.
 *     So an endpoint with sends of ours in UCX (inflight > 0, closed by
 *     force on a drop: L12) has the peer's id, and no wire-up request of
 *     the peer's for it is still on its way: UCX 1.13 pairs two
 *     endpoints made to each other by a count of those made to a peer,
 *     and the peer's request, if it sent one, goes before the rest of
 *     its wire-up on one connection, so it was processed once our
 *     endpoint has the id (from that request, or from the peer's reply
 *     to ours). An endpoint still wiring up has only our internal
 *     messages in UCX, so a drop keeps it (L12), and a late request
 *     finds it. The abort this prevents: both ranks connected at once,
 *     the peer's endpoint took our id from our request (the side with
 *     the smaller worker uuid then waits for its own request's answer),
 *     its own request was still on its way when its host was cut off;
 *     we dropped it with our first sends queued in UCX behind the
 *     wire-up and closed our endpoint by force; once the link came back,
 *     our UCX answered the late request from a new endpoint, and the
 *     peer's UCX aborted on an id it did not expect
 *     (ucp_ep_update_remote_id: "remote_id == remote_ep_id" assertion,
 *     ucp_wireup_process_reply; compiled into Debian's 1.13.1). Staged
 *     on the bed with an LD_PRELOAD shim that holds the peer's request
 *     (tests/hosts/test_hosts_wireup.sh: before L13, the dropped rank
 *     aborted). Cost: none after the wire-up; a first send to a peer on
 *     another host waited for that wire-up before too (UCX queued it
 *     behind the request), except S2's lean sends, whose first ones now
 *     wait for it as well.
 *  L14 A rendezvous receive from a peer is counted (rx_inflight, from
 *     ucp_am_recv_data_nbx to its callback), and a peer dropped with one
 *     under way is closed by force like one with our sends in UCX (L12),
 *     not kept: UCX ends such a receive only when its endpoint fails or
 *     closes, and a kept endpoint does neither, so the caller's receive
 *     waited forever (tests/hosts/test_hosts_queued.sh: rank 1 dropped
 *     rank 0 in the middle of an 8 MiB message across a cut; its
 *     td_recv hung until the job's timeout). The forced close fails it
 *     at once, with TD_ERR_PEER naming the rank as a send cut so
 *     (recv_data_cb, send_cb: UCX says UCS_ERR_CANCELED). Seen on one link and on two alike: not a
 *     matter of lanes; on two, L13's argument holds as on one
 *     (TD_TEST_WIREUP_RAILS=2 tests/hosts/test_hosts_wireup.sh: no abort
 *     in 2 runs). Open: after such a forced close, UCX 1.13.1's TCP
 *     transport may crash the process when the peer's traffic reaches
 *     it again once the partition heals (docs/hosts.md, "Two links per
 *     host"): uct_tcp_ep_destroy keeps a connected endpoint receiving,
 *     the peer's CONN_FIN frees it inside uct_tcp_iface_handle_events,
 *     and the same event's EVWRITE then calls it. Shutting down our
 *     connections to the host at the drop (tried as L15) only moved the
 *     crash to the dropped rank, whose endpoint met our close with its
 *     own sends pending: tests/hosts/test_hosts_wireup.sh, rank 1,
 *     SIGSEGV under uct_tcp_iface_progress in 2 of 12 runs. A fix
 *     belongs in UCX's handle_events.
 *  L16 A peer UCX cannot reach at all is failed like a lost one: when
 *     ucp_ep_create says UCS_ERR_UNREACHABLE (no transport of ours matches
 *     the peer's address: UCX_TLS=self, or =sm,self across hosts; fixed
 *     for the pair of processes), and the peer is not found gone (L5's
 *     check, as L10), peer_unreachable keeps the reason as its fate
 *     ("is unreachable: UCX has no transport to it ...") and fails it
 *     with TD_ERR_PEER: peer_failed runs, so every pending and later
 *     collective, send, RPC and barrier involving it fails at once naming
 *     the rank and the reason, where before each waited out its own
 *     timeout (TODIST_COLL_TIMEOUT: "timed out waiting for rank 1") while
 *     the transport retried the connect every send. A revive (R1)
 *     clears it, as for any failed peer.
 *
 * A tagged exchange with one peer (U1..U7; td__transport_pair_post): the
 * small all_reduce of two ranks on two hosts is one message each way, and
 * UCX's active messages cost it a handler, a header and todist's own
 * matching; UCX's tag matching lands the body in place (0.2 us of an 8 us
 * exchange here, and Open MPI's path).
 *  U1 Only between ranks of different hosts, and only what the caller
 *     chose on both sides alike (a posted receive waits for a tagged
 *     message only): the caller decides from facts both sides share.
 *  U2 Posted under the token, never waiting for the store (L11): with no
 *     endpoint yet, or one still wiring up (L13: our sends to it park),
 *     it asks for one (watch) and returns TD_ERR_NOT_FOUND; the caller
 *     drives and posts again.
 *  U3 The caller's record lives until both completions came: UCX writes
 *     RBUF and reads SBUF until then, and calls back into the record. A
 *     completion's DONE bit is its last touch of the record: the owner,
 *     on another thread, may return the moment it sees it. Every writer
 *     of DONE holds the token (the post, both callbacks), so a bit is
 *     set by a load and a release store, not a locked or (pair_mark: two
 *     fewer locked instructions a call, ~5 ns each here).
 *  U4 A receive is cancelled under the token, and only while its DONE bit
 *     is clear (its request is then still UCX's); the cancel completes it
 *     with TD_ERR_CANCELED. A send needs none: one left in UCX counts in
 *     the peer's inflight as any send, so a drop closes its endpoint by
 *     force (L12) and a failed peer's endpoint fails it (E1); a live
 *     one's completes.
 *  U5 A message whose receive was cancelled stays in UCX's unexpected
 *     queue: one per failed call at most (its sender sends once).
 *  U6 The UCX tag is the caller's (group id, call) XOR the first 8 bytes
 *     of the pair's job tag, sender to receiver: a process that does not
 *     know TODIST_JOB_TOKEN cannot make a message a posted receive takes
 *     (the job tag's protection, no more: no integrity, no replay).
 *  U7 A caller that passes DONE posts and then drives in one hold of the
 *     token, known as a driver from before it takes the token (the
 *     progress thread naps, N1, U8), for up to SPIN_S, its clock first read
 *     after 32 rounds: the post and a wait of its own less one token
 *     hand-off, one driver count and one clock read (a 2-host 8 B
 *     all_reduce is about 9 us, and each of these about 20-40 ns here).
 *     It leaves as any drive does (armed, drive_left, the nap
 *     signalled if it gave up). Not from a callback (the holder's own
 *     round would recurse): there it only posts.
 *  U8 That driver is counted (drive_count, two locked instructions of
 *     ~5 ns each) only when it has to wait for the token (a holder
 *     driving its own wait, an RPC pool leader, sees it in
 *     td__transport_drive_wanted and leaves) or at its first look at the
 *     clock; before that, drive_gen's plain bump tells the progress
 *     thread, which naps at the next change it sees as at a count.
 *  U9 The send is posted before the receive: the message leaves one
 *     ucp_tag_recv_nbx earlier, and the receive is posted while it is out
 *     (a reply takes microseconds; one that came first waits in UCX's
 *     unexpected queue, where the receive finds it). 8 B at 1+1: 20 ns
 *     less from a receive's completion to the next send.
 *
 * Bodies offered in place (O1..O5): between ranks of one host a large
 * body costs two copies through UCX's shared memory; offered, it costs
 * one, the receiver's process_vm_readv (ucx_transport/cma.h).
 *  O1 Only a handler id that asked (td__transport_set_inplace) has its
 *     host bodies offered, only to a peer of this host (params.same_host)
 *     that has not refused, and only when they hold its minimum or more.
 *     The offer (flag WIRE_F_OFFER) carries no data: after the user header
 *     come be32 pid | 4 zero | be64 token address | be64 token | be64
 *     sequence number, then a be64 address per body.
 *  O2 A receiver reads an offer only when its own handler id asked too,
 *     its UCX moves host memory only (no device destinations), the sender
 *     is of this host, and the offer's token is the job's for the offer's
 *     pid (HMAC-SHA256 of the pid under a key derived from
 *     TODIST_JOB_TOKEN: cma_token_for) and that pid holds it at the
 *     offer's address (td__cma_check; both once per pid): a process
 *     outside the job, or a fork of a rank, cannot serve a body even with
 *     a copied job tag. Then it reads on the token holder, inside the
 *     receive callback, so
 *     a sender's messages reach the handler in the order sent. Otherwise
 *     it answers "refused" without delivering; the sender sends that
 *     message again with its bodies through UCX (it may then arrive after
 *     later ones) and offers that peer nothing more.
 *  O3 An offered send completes only when UCX completed the offer and the
 *     reader's answer came (handler id CMA_ID, transport-internal, not
 *     counted in the join's sums): until then the bodies stay untouched
 *     and the op is on tp->offers (token holder only). A failed peer fails
 *     its offers with TD_ERR_PEER; shutdown cancels what is left.
 *  O4 An answer is taken only from the rank the offer went to, for a
 *     sequence number on the list; anything else is dropped.
 *  O5 A read that fails after delivery (the sender died mid-read) finishes
 *     the message with its error, as a rendezvous cut by a death does,
 *     and answers "failed": the sender's send fails.
 *
 * Small messages through mailboxes (X1..X6): between ranks of one host a
 * small message costs UCX's active-message machinery on both sides; in a
 * mailbox (ucx_transport/shm_mbox.h, B1-B8) it costs two cache-line
 * transfers and a copy.
 *  X1 Only a handler id that asked (td__transport_set_mbox) has its
 *     messages written into mailboxes, only to a peer of this host that
 *     offered its inbox, only host bodies that fit a slot with our header
 *     (TD__MBOX_DATA bytes), only while the peer's ring has a free slot;
 *     the rest go through UCX. The token holder writes them (op_start, so
 *     they take their place among the sends exactly as a UCX send would)
 *     and polls our inbox in every round of progress, and the send
 *     completes once written.
 *  X2 A rank offers its inbox (LIVE_ID 'M': the offer of B5) to a peer of
 *     this host before the first message it sends it; the peer records it
 *     and attaches at its own next send (syscalls on the token holder,
 *     once per peer).
 *  X3 Order per sender across both paths: each active message posted to a
 *     peer is counted (am_tx; the receiver counts those it receives,
 *     rx_count, same set: everything that passes the job tag). A mailbox
 *     message carries the count at its writing and is taken only once
 *     that many arrived; before an active message is handled, its
 *     sender's mailbox is drained of what was written before it. A
 *     message dropped by TODIST_FAULT is neither posted nor counted.
 *  X4 A progress thread or driver that sleeps on the event fd announces it
 *     in our inbox (B6), looks at the mailboxes once more, and sleeps
 *     MBOX_RECHECK_NS first; a writer that sees the announcement sends a
 *     wake-up (LIVE_ID 'W'), which is also counted (X3).
 *  X5 A failed peer's mailboxes are neither written nor read again, nor
 *     a revived one's (td__transport_peer_revive: a new process took the
 *     rank; what the old one left in our inbox is never delivered, and
 *     the new one talks through UCX).
 *  X6 A mailbox message is checked as a UCX one (wire_parse, the job tag
 *     of the mailbox's owner, no offer, no internal id) from a copy taken
 *     once; one refused is acked without taking its ring position, so a
 *     process outside the job that wrote into the inbox (it would need
 *     the receiver's ptrace rights) neither runs anything nor stalls the
 *     ring.
 *  X7 While mailboxes are active and UCX had no event for UCX_IDLE_ROUNDS
 *     rounds of progress, UCX is polled every UCX_EVERY-th round only,
 *     and at once in the round after a mailbox message waited for an
 *     active message (X3); any UCX event brings back a poll every round.
 *     So a UCX message waits at most UCX_EVERY - 1 rounds more, and X3's
 *     order is untouched (it never depended on when UCX is polled).
 *  X8 A message of a mailbox handler id (X1) posted by the token holder
 *     outside UCX's callbacks (in_ucx: a handler run from our mailbox, a
 *     completion's callback) is started at once, after everything the
 *     holder's queues hold (order per sender, as a direct sender's): an
 *     inline handler's reply reaches the caller's mailbox before the
 *     handler's own clean-up runs. Inside UCX's callbacks it waits for
 *     the end of the progress call, as every holder's send does.
 *  X9 tp->mb is set up (td__transport_set_mbox) holding the token: a
 *     peer's offer (X2) may arrive while this rank is still in td_init,
 *     and the holder records it into tp->mb (ThreadSanitizer saw the
 *     progress thread read the peer table while it was being written).
 * X10 A rank allowed one core only (its threads share it: bind=closest
 *     with as many local ranks as cores, a taskset), a driver that has
 *     waited LONG_WAIT_S sleeps on the event fd (at most 1 ms at a time)
 *     in any progress mode, as one on scarce cores in busy mode does after
 *     SLEEP_AFTER_S; with 2 cores or more a deliberate spin (P8, the
 *     pipeline's stages) is left alone. A yield is no
 *     sleep: the scheduler may run the yielder again at once, and across
 *     scheduling groups it did, for seconds. Slurm starts each node's
 *     tasks in a session of their own (an autogroup); with the test's
 *     nodes on one machine and bind=closest, a rank of each node was bound
 *     to each core, and a waiter that yielded on held its core while the
 *     rank it waited for, runnable, did not run (test_spank_slurm 17 under
 *     load: 2.5 s of 2.5 s to the waiter, none to the 5 runnable threads
 *     of the other rank; the first broadcast timed out after 60 s).
 *
 * Small bodies from another host, taken by the handler (S1):
 *  S1 A message that came eagerly (no rendezvous, no offer) through UCX
 *     from a peer known to be on another host (connected, and
 *     params.same_host said no, or there is no host map) shows its
 *     bodies' bytes to the handler (rx.eager). A handler that copies them
 *     out itself sets rx.taken: the message is then done and counted as
 *     received (the join), with no destination, no buffer allocated and
 *     no done callback. The handler ran on the holder, in order, after
 *     the checks (wire_parse, the job tag, X3), as for any message.
 *     Peers of this host, mailboxes, offers and rendezvous go as before.
 *     Counted (td__transport_taken_count).
 *
 * Small sends to another host, lean (S2):
 *  S2 A send of at most one host body, header and body within LEAN_MAX,
 *     to a peer known to be on another host (connected, params.same_host
 *     said no, not failed, not wiring up: L13), by a thread that finds
 *     the token free, with no TODIST_FAULT rules and nothing of this
 *     rank's queued before it (the shared queue and the holder's own list
 *     both empty), is first
 *     offered to UCX as an immediate short send (UCP_OP_ATTR_FLAG_FORCE_
 *     IMM_CMPL): our header built once on the stack, no op, no UCX
 *     request, no completion queue. Done inline, it is counted as any send
 *     (posted_local, am_tx, n_sent, completed) and its callback runs
 *     before td__transport_send returns, as a direct send's completion
 *     did already. Anything else (UCX has no room, the peer failed, an
 *     error) sent nothing, and the message goes the usual way with an op
 *     (op_start), which tries that same short send first: order per
 *     sender and failure naming are the usual path's. Peers of this host
 *     (mailboxes, offers), the holder's own sends and queued ones never
 *     take it. Counted (td__transport_lean_count).
 *  S3 A body larger than one UCX TCP segment (UCX_TCP_SEG_SIZE, 64 KiB by
 *     default) sent eagerly to a peer on another host arrives in
 *     fragments that UCX copies into a buffer of its own before our
 *     callback sees it, and we copy it again into the receive's buffer: a
 *     copy that Open MPI's tagged receive, landing in place, does not
 *     make (12% of a rank's CPU in memmove against 1.6%). So a layer that
 *     cuts a large transfer to such a peer into messages cuts it at
 *     TD_TRANSPORT_FAR_SEG_BYTES (UCX's default segment less 1 KiB for
 *     the headers: UCX's, ours, the layer's): each comes in one segment
 *     and is delivered from it. 2-rank all_reduce of 1 MiB across
 *     emulated hosts: 631 us in 1 MiB pieces, 695 us in 64 KiB ones (just
 *     over: fragments), 440-496 us in 63 KiB ones (bench/RESULTS.md,
 *     issue 30). A constant, not UCX_TCP_SEG_SIZE read here: the
 *     receiver posts what the sender cuts, so both must cut alike
 *     whatever their environments (a larger setting keeps the pieces
 *     whole; a smaller one has UCX cut them again, as before).
 *
 * Endpoints (E1):
 *  E1 Once close_endpoints has begun (tp->closing, token holder), no
 *     endpoint is made: a peer's ping answered, an offer refused or a
 *     wake-up sent while the closes are progressed would otherwise open a
 *     second endpoint to a peer whose first was just closed. That one is
 *     never closed, and its wire-up (UCX 1.13 matches endpoints by a
 *     count of those made to a peer: the peer, whose count no longer
 *     agrees, makes an endpoint of its own for it and replies) was still
 *     queued when ucp_worker_destroy purged it: an assertion abort ("got
 *     REQ/REP message", ucp_request.c:684), seen at 2x2 hosts in 1 of 63
 *     runs under load. What closing refuses is best effort anyway (the
 *     peer is exiting or about to be told so).
 *
 * Process exit (Z1):
 *  Z1 A process that exits with its transport alive (a program that
 *     returns from main or calls exit() without td_finalize, as a rank
 *     that cannot recover does) has its progress thread stopped and
 *     joined, and the token taken and kept, by an atexit handler
 *     (exit_halt) before any library's destructor runs: glibc runs the
 *     atexit handlers, ours registered at the first td__transport_create,
 *     before _dl_fini's destructors. Before, the progress thread went on
 *     in ucp_worker_progress while libucs's destructor (ucs_async_global_
 *     cleanup) freed the async handler table, and UCX 1.13.1 aborted in
 *     ucp_worker_iface_check_events_do ("ucp_worker.c:634 Fatal: failed
 *     to modify N event handler to UCS_EVENT_SET_EVREAD: No such
 *     element": the interface's event fd is no longer in the freed
 *     table). The halted transport is left as it is (no endpoint closed,
 *     nothing freed: the process is ending); a later td__transport_destroy
 *     (another atexit handler's td_finalize) returns at once. Not in a
 *     forked child (its pid differs), nor when the progress thread itself
 *     exits. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <linux/futex.h>
#include <sys/syscall.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <ucp/api/ucp.h>

#include "ucx_transport/transport.h"
#include "ucx_transport/fault.h"
#include "ucx_transport/cma.h"
#include "ucx_transport/shm_mbox.h"
#include "base/clock.h"
#include "base/cpu.h"
#include "base/byteorder.h"
#include "base/log.h"

#define TD_AM_ID          0x7d        /* our one UCP active-message id */
#define WIRE_VERSION      2
#define TAG_LEN           16
#define TAG_OFF           16
#define WIRE_FIXED        (16 + TAG_LEN)
#define WIRE_BODY         16
#define WIRE_F_OFFER      0x01        /* O1: bodies offered in place */
#define OFFER_FIXED       32
#define OFFER_BODY        8
#define OFFER_LEN(nb)     (OFFER_FIXED + OFFER_BODY * (nb))
#define WIRE_MAX          (WIRE_FIXED + WIRE_BODY * TD_TRANSPORT_BODIES_MAX + \
                           TD_TRANSPORT_HEADER_MAX + \
                           OFFER_LEN(TD_TRANSPORT_BODIES_MAX))
#define BLOCK_POLL_MS     100         /* keepalive needs progress now and then */
/* Host bodies up to this many bytes go eager (op_start): a rendezvous
 * needs the sender to make progress after it posted, so a sender that
 * goes on computing (a pipeline stage) held its receiver up by up to one
 * compute op: 25 KiB activations arrived 315-386 us late on average, p90
 * 0.9 ms, against 41-118 us eager (bench/RESULTS.md, issue 33). Larger
 * bodies within a host are read in place (runtime/coll/cma.h). Only to
 * peers of this host (op_start). A user's UCX_RNDV_THRESH wins: then UCX
 * chooses, as before. */
#define EAGER_MAX         (64u * 1024u)
/* ... and up to this many to a peer known to be on another host (TCP).
 * There UCX's rendezvous puts the body with TCP's emulated put, a round
 * trip slower than sending it: a 512 KiB AM ping-pong between emulated
 * hosts took 242-254 us a way by rendezvous against 139-140 us eager, and
 * 2-rank all_reduce of 1 MiB 401-417 us against 296-302 us (ucx_perftest
 * and bench/collectives, bench/RESULTS.md, issue 30). 1 MiB covers the
 * collectives' segments (runtime/coll/allreduce.c); larger bodies keep
 * the rendezvous, so no receiver buffers more than this of one unexpected
 * message. Under a user's UCX_RNDV_THRESH, 0 (UCX chooses). */
#define EAGER_REMOTE_MAX  (1024u * 1024u)
/* S2: header and body of a lean send at most this many bytes (UCX's
 * short sends over TCP take up to about 8 KiB; a larger one would only be
 * refused and sent again the usual way). */
#define LEAN_MAX          1024u
#define LIVE_ID           (TD_TRANSPORT_HANDLERS_MAX - 1)   /* L3 */
#define CMA_ID            (TD_TRANSPORT_HANDLERS_MAX - 2)   /* O3 */
/* A reader's answer to an offer (O2-O5). */
enum { ANS_READ = 0, ANS_REFUSED = 1, ANS_FAILED = 2, ANS_PEER = 3,
       ANS_LATER = 4 };     /* L11: refused this once, offer again later */
#define LIVE_TICK_NS      100000000LL
#define MBOX_RECHECK_NS   50000L      /* X4: a sleeper's first nap */
#define LIVE_DEFAULT_S    3.0
#define LIVE_HEARD_MIN_NS 1500000000L /* L7, L8 */

/* UCX defaults the runtime sets unless the user set UCX_<name>. */
static const struct { const char *name, *value; } ucx_defaults[] = {
    /* PEER error handling otherwise disables shared memory in UCX 1.13:
     * 8 B round trip 13 us over TCP instead of 0.35 us over shm. */
    { "MM_ERROR_HANDLING",  "y" },
    /* Notice a dead peer within about a second (default 20 s). */
    { "KEEPALIVE_INTERVAL", "250ms" },
    /* X11: an eager body of this host (< EAGER_MAX; larger ones are read
     * in place) in one shared-memory segment up to about 59 KiB. With
     * UCX's 8 KiB a 32 KiB pipeline activation went as 4 fragments, and a
     * receiver that found it waiting took one fragment a
     * ucp_worker_progress and copied each twice: 17-19 us from its wait to
     * the data against 3.8-4.8 us in one segment (traced, bench/RESULTS.md,
     * issue 33). Below 64 KiB: UCX 1.13's mm FIFO keeps a segment's length
     * in 16 bits; 64k hung a 1.2 MB rendezvous (test_coll.sh big, CMA
     * off). */
    { "MM_SEG_SIZE",        "60k" },
    /* ... and the receive pool grows by 64 such segments (3.75 MiB of
     * shared memory, about UCX's 512 of 8 KiB), not 512 (30 MiB). */
    { "MM_RX_BUFS_GROW",    "64" },
};

typedef struct send_op {
    struct send_op      *next;
    td_transport_t      *tp;
    int                  dst;
    td_transport_send_fn cb;
    void                *arg;
    td_status_t          status;     /* for deferred completion */
    size_t               n_bodies;
    size_t               wire_len;
    td_mem_type_t        mem;
    char                *why;        /* malloc'ed: why connecting failed */
    int                  faulted;    /* TODIST_FAULT: 1 dropped (not
                                      * counted), 2 to break (op_start) */
    uint16_t             id;         /* handler id */
    uint8_t              no_offer;   /* O2: refused once, bodies via UCX */
    uint8_t              offering;   /* O3: on tp->offers or answered */
    uint8_t              hdr_done;   /* O3: UCX completed the offer */
    uint8_t              answered;   /* O3: the answer came (answer) */
    uint8_t              answer;
    uint64_t             seq;        /* O3: the offer's sequence number */
    uint8_t              spare_size; /* OP_SPARE_BYTES long (op_free) */
    size_t               total;      /* bytes of the bodies */
    uint8_t             *wire;       /* our header + the user header */
    ucp_dt_iov_t         iov[];      /* n_bodies, then the wire bytes */
} send_op_t;

typedef struct {
    ucp_ep_h ep;
    int      failed;
    int      left;       /* td__transport_peer_left: force-close it */
    int      watch;      /* connect at the next round (td__transport_watch) */
    int      revive;     /* a new process took this rank: reset it at the
                          * next round (td__transport_peer_revive, R1) */
    ucp_ep_h dead_ep;    /* the last endpoint closed by force (R2) */
    int      inflight;   /* sends in UCX, not yet completed (token holder) */
    int      rx_inflight;    /* L14: its rendezvous bodies UCX is receiving
                              * (token holder) */
    int      tried;      /* an endpoint was made or tried (L5) */
    /* bodies in place (O1-O2), token holder only */
    uint8_t  host;       /* 0 not asked, 1 this host, 2 another */
    uint8_t  refused;    /* it refused an offer: offer it nothing more */
    uint32_t cma_pid;    /* its pid, checked (td__cma_check), or 0 */
    /* mailboxes (X1-X6), token holder only */
    uint32_t am_tx;      /* active messages posted to it (X3) */
    uint8_t  mbox_offered;   /* our inbox was offered to it (X2) */
    uint8_t  mbox_dead;  /* failed or revived: no mailbox again (X5) */
    /* liveness (L1-L3), token holder only */
    int      remote;     /* on another host: watched */
    uint8_t  dropped;    /* this rank's liveness check dropped it (L12) */
    uint8_t  wiring;     /* L13: 1 its endpoint's wire-up is unproven (our
                          * sends to it park), 2 proven, parked sends to
                          * start (addr_arrived), 0 neither */
    unsigned ep_gen;     /* endpoints made to it (L13's probe names one) */
    uint32_t rx_count;   /* messages received from it */
    uint32_t rx_seen;    /* rx_count at the last tick */
    /* times on the watched clock (tp->live_watched_ns, L6) */
    int64_t  heard_w;    /* when rx_count last moved (or it was connected) */
    int64_t  ping_w;     /* when it was last pinged, -1 not since heard */
    uint8_t  busy_told;  /* L7 logged for this silence */
    /* its address (L11): these six under tp->res_lock */
    uint8_t  addr_state; /* ADDR_* */
    unsigned addr_gen;   /* bumped by a revive: an older fetch is dropped */
    td_status_t addr_status;     /* ADDR_FAILED: why */
    char    *addr_why;
    void    *addr;       /* ADDR_READY: the resolver's answer */
    size_t   addr_len;
    /* token holder only */
    int      parked;     /* its sends on tp->parked_head (L11) */
    uint8_t  watch_later;    /* watched while its address was fetched */
    /* dropped (L12), token holder only */
    uint8_t  told;       /* 'D' answers sent it since (at most TELL_MAX) */
    uint8_t  told_due;   /* it said it dropped this rank: fail it */
    uint32_t drop_quiet_ms;  /* how long it was silent when dropped */
    ucp_ep_h linger_ep;  /* its endpoint, kept open (unused) to tell it */
    /* it dropped this rank (L12): fate, written by the token holder before
     * fated is set (release); read by any thread once fated is seen */
    int      fated;
    char     fate[128];
    int      unreach;    /* L16: the last connect found no transport */
} peer_t;

/* L11: a peer's address, fetched by the resolver thread. */
enum { ADDR_NONE, ADDR_WANTED, ADDR_FETCHING, ADDR_READY, ADDR_FAILED };

/* An incoming message whose bodies are still arriving (sized by the
 * number of bodies: small messages cost a small allocation). */
typedef struct {
    td_transport_t      *tp;
    int                  src;
    int                  heap;       /* malloc'ed (rendezvous) or on stack */
    size_t               n_bodies;
    td_transport_done_fn done;
    void                *done_arg;
    td_iov_t            *dest;       /* n_bodies each, after the struct */
    ucp_dt_iov_t        *iov;
    uint8_t             *owned;
} recv_op_t;

#define RECV_OP_SIZE(nb) (sizeof(recv_op_t) + (nb) * (sizeof(td_iov_t) + \
                          sizeof(ucp_dt_iov_t) + 1))

/* Lay out a receive of NB bodies in MEM (RECV_OP_SIZE(nb) bytes). */
static recv_op_t *
recv_op_init(void *mem, size_t nb, int heap)
{
    recv_op_t *r = mem;

    memset(r, 0, RECV_OP_SIZE(nb));
    r->heap = heap;
    r->dest = (td_iov_t *)(r + 1);
    r->iov = (ucp_dt_iov_t *)(r->dest + nb);
    r->owned = (uint8_t *)(r->iov + nb);
    return r;
}

/* The progress thread and drivers look at tp->stop with acquire: what
 * td__transport_destroy wrote before setting it (close_timeout) is then
 * visible to close_endpoints. */
#define STOPPED(tp) __atomic_load_n(&(tp)->stop, __ATOMIC_ACQUIRE)

typedef struct {
    td_transport_recv_fn fn;
    void                *arg;
} handler_t;

struct td_transport {
    td_transport_params_t params;
    void *_Atomic         op_spare;      /* a free small send_op_t (op_new) */
    td_progress_mode_t    mode;
    ucp_context_h         ctx;
    ucp_worker_h          worker;
    ucp_address_t        *addr;
    size_t                addr_len;
    int                   efd;            /* -1 without wakeup (N2) */
    int                   wakeup;         /* N2: a thread may sleep on efd */
    unsigned              mem_types;
    size_t                eager_max;   /* EAGER_MAX, 0 under UCX_RNDV_THRESH */
    size_t                eager_far;   /* EAGER_REMOTE_MAX, or 0 likewise */
    peer_t               *peers;
    handler_t             handlers[TD_TRANSPORT_HANDLERS_MAX];
    pthread_t             thread;
    int                   thread_started;
    int                   stop;           /* set once by destroy: read
                                           * with acquire (STOPPED) */
    int                   halted;         /* Z1: set by exit_halt */
    int                   token;          /* 1: a thread is in the worker */
    int                   n_drivers;      /* threads in td__transport_drive */
    unsigned              drive_gen;      /* drives begun (N1: a hint) */
    unsigned              nap_us;         /* the next nap (N1): written by
                                           * the progress thread only */
    const int            *yield_ctr;      /* > 0: busy loop yields the core */
    int                   ctr_sleeping;   /* the thread sleeps on yield_ctr */
    int                   sleeping;       /* a driver sleeps on the efd */
    int                   watch_pending;  /* some peer.watch is set */
    int                   revive_pending; /* some peer.revive is set */
    int                   closing;        /* E1: endpoints are closing */
    int                   told_pending;   /* L12: told_fail (holder) */
    int                   in_poll;        /* progress thread asleep on efd */
    /* X7, X8, token holder only */
    unsigned              ucx_idle;       /* rounds since UCX had an event */
    int                   ucx_due;        /* poll UCX next round */
    int                   in_ucx;         /* inside ucp_worker_progress */
    unsigned              drive_left;     /* drives left (N3): + 2 each,
                                           * bit 0 set when it gave up;
                                           * written by the token holder */
    int                   scarce;         /* fewer than 2 cores a local rank */
    int                   one_core;       /* X10: this rank may use 1 core */
    pthread_mutex_t       drv_lock;       /* the progress thread's nap */
    pthread_cond_t        drv_cond;
    double                close_timeout;
    double                gone_last;      /* peers_liveness: last round */
    unsigned              gone_ctr;       /* rounds since (token holder) */
    int                   unclosed;       /* endpoints that did not close */
    int                   unclosed_rank;  /* the first of them */
    /* posted sends, from any thread */
    pthread_mutex_t       lock;
    send_op_t            *q_head, *q_tail;
    int                   q_nonempty;     /* atomic hint for busy polling */
    /* Sends accepted and completed. Each counter has one writer (posting
     * threads under the lock; the token holder alone), so the hot path
     * needs no locked instructions; others read them relaxed. */
    uint64_t              posted_remote;  /* under lock */
    uint64_t              posted_local;   /* token holder */
    uint64_t              completed;      /* token holder */
    send_op_t            *local_head, *local_tail; /* posted by callbacks */
    /* token holder only */
    send_op_t            *done_head;      /* completions to report */
    size_t                dropped;        /* token holder writes */
    size_t                rndv_received;  /* token holder writes */
    uint64_t              ucx_events;     /* token holder writes (X11) */
    size_t                rejected;       /* wrong job tag; token holder */
    uint8_t              *tag_to;         /* world x TAG_LEN: ours to dst */
    uint8_t              *tag_from;       /* world x TAG_LEN: src's to us */
    td__faults_t          faults;         /* TODIST_FAULT, tests only */
    uint64_t              n_sent, n_received;   /* token holder writes */
    /* liveness (L1-L4), token holder only except live_due */
    int64_t               live_ns;        /* TODIST_LIVENESS; 0 off */
    int64_t               live_next_ns;   /* the next tick */
    int64_t               live_last_ns;   /* the last tick (0: none) */
    int64_t               live_watched_ns;    /* the watched clock (L6) */
    unsigned              live_rounds;
    int                   live_due;       /* tick at the next round */
    /* bodies in place (O1-O5) */
    size_t                inplace_min[TD_TRANSPORT_HANDLERS_MAX]; /* 0 off */
    send_op_t            *offers;         /* awaiting answers (holder) */
    uint64_t              offer_seq;      /* holder */
    uint64_t              n_inplace;      /* messages read in place */
    uint64_t              n_refused;      /* offers refused (holder) */
    uint8_t               cma_key[32];    /* O2: keys the pids' tokens */
    uint64_t              cma_token;      /* O2: ours, read by readers */
    /* small messages through mailboxes (X1-X6) */
    uint8_t               mbox_on[TD_TRANSPORT_HANDLERS_MAX];
    td__mbox_t            mb;             /* set up by set_mbox */
    uint64_t              n_mbox_tx, n_mbox_rx;   /* token holder */
    uint64_t              n_taken;        /* S1: bodies taken by handlers */
    uint64_t              n_lean;         /* S2: lean sends (holder) */
    /* addresses fetched off the token holder (L11) */
    pthread_mutex_t       res_lock;       /* never held across a fetch */
    pthread_cond_t        res_cond;       /* a peer is wanted, or stop */
    pthread_t             res_thread;
    int                   res_started;    /* 1 running, -1 could not start
                                           * (res_lock) */
    int                   res_stop;       /* res_lock */
    int                   res_wanted;     /* peers ADDR_WANTED (res_lock) */
    int                   addr_news;      /* a fetch ended (atomic) */
    send_op_t            *parked_head, *parked_tail;   /* holder */
};

/* Both read on every send: initial-exec, a plain %fs load instead of a
 * call to __tls_get_addr (two a send, 22 instructions each; 8 bytes of
 * the static TLS that glibc keeps for libraries opened later, as a
 * Python binding opens this one). */
#define TLS_IE __attribute__((tls_model("initial-exec")))

/* The transport whose token this thread holds (NULL: none). */
static __thread td_transport_t *tl_holder TLS_IE;
/* This thread drives progress right after its next sends (td_transport_
 * will_drive): a direct send need not arm the worker for the progress
 * thread. */
static __thread int tl_will_drive TLS_IE;

/* The token is a futex word (as in Drepper's "Futexes Are Tricky"): 0
 * free, 1 held, 2 held and a thread may sleep on it. A thread that cannot
 * get it sleeps instead of spinning, so the holder, maybe preempted on the
 * same core, can finish; the uncontended path is one atomic each way. */
static int
token_take(td_transport_t *tp)
{
    int expected = 0;

    if (__atomic_load_n(&tp->token, __ATOMIC_RELAXED) != 0 ||
        !__atomic_compare_exchange_n(&tp->token, &expected, 1, 0,
                                     __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
        return 0;
    }
    tl_holder = tp;
    return 1;
}

/* Sleep on the token for at most USEC microseconds (0: no limit) unless it
 * changed from 2; then try once more. 1 when taken. */
static int
token_wait(td_transport_t *tp, long usec)
{
    struct timespec ts = { usec / 1000000, (usec % 1000000) * 1000L };
    int c = __atomic_load_n(&tp->token, __ATOMIC_RELAXED);

    if (c == 0 && token_take(tp)) {
        return 1;
    }
    /* Announce a sleeper: the holder's drop then wakes one. */
    if (c == 2 || __atomic_exchange_n(&tp->token, 2, __ATOMIC_ACQUIRE) != 0) {
        syscall(SYS_futex, &tp->token, FUTEX_WAIT_PRIVATE, 2,
                usec > 0 ? &ts : NULL, NULL, 0);
        /* Take it as contended: other sleepers may remain. */
        if (__atomic_exchange_n(&tp->token, 2, __ATOMIC_ACQUIRE) != 0) {
            return 0;
        }
    }
    tl_holder = tp;
    return 1;
}

static void
token_drop(td_transport_t *tp)
{
    tl_holder = NULL;
    if (__atomic_exchange_n(&tp->token, 0, __ATOMIC_RELEASE) == 2) {
        syscall(SYS_futex, &tp->token, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    }
}

/* A drive begun (N1, U8: a hint; a lost increment still changes it). */
static void
drive_begun(td_transport_t *tp)
{
    __atomic_store_n(&tp->drive_gen, __atomic_load_n(&tp->drive_gen,
                     __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
}

/* A driver counted (the progress thread naps, N1). */
static void
drive_count(td_transport_t *tp)
{
    __atomic_fetch_add(&tp->n_drivers, 1, __ATOMIC_ACQ_REL);
    drive_begun(tp);
}

/* ... and no longer. */
static void
drive_uncount(td_transport_t *tp)
{
    __atomic_fetch_sub(&tp->n_drivers, 1, __ATOMIC_ACQ_REL);
}

/* Wake a thread asleep on the worker's event fd; without the wakeup
 * feature none ever is (N2), and UCX would refuse the call. */
static void
worker_signal(td_transport_t *tp)
{
    if (tp->wakeup) {
        ucp_worker_signal(tp->worker);
    }
}

/* Tell the progress thread to stop (asleep on the event fd or napping)
 * and join it. */
static void
thread_stop(td_transport_t *tp)
{
    __atomic_store_n(&tp->stop, 1, __ATOMIC_RELEASE);
    worker_signal(tp);
    pthread_mutex_lock(&tp->drv_lock);
    pthread_cond_signal(&tp->drv_cond);
    pthread_mutex_unlock(&tp->drv_lock);
    pthread_join(tp->thread, NULL);
}

/* Z1: the process's live transport (one a process), for exit_halt. */
static pthread_mutex_t exit_lock = PTHREAD_MUTEX_INITIALIZER;
static td_transport_t *exit_tp;
static pid_t exit_pid;
static pthread_once_t exit_once = PTHREAD_ONCE_INIT;

/* Z1: at exit, before the libraries' destructors: no thread of ours is in
 * UCX from here on. */
static void
exit_halt(void)
{
    td_transport_t *tp;

    pthread_mutex_lock(&exit_lock);
    tp = exit_tp;
    if (tp != NULL && exit_pid == getpid() && tp->thread_started &&
        !pthread_equal(pthread_self(), tp->thread)) {
        __atomic_store_n(&tp->halted, 1, __ATOMIC_RELEASE);
        thread_stop(tp);
        tp->thread_started = 0;
        /* Drivers see stop and leave, direct senders are brief: the token
         * is then ours for good. A holder that never lets go (stuck in a
         * callback) is given up on after a second rather than hang the
         * exit. */
        for (int i = 0; tl_holder != tp && i < 1000 && !token_wait(tp, 1000);
             i++) {
        }
    }
    pthread_mutex_unlock(&exit_lock);
}

static void
exit_register(void)
{
    if (atexit(exit_halt) != 0) {
        td_log_warn("transport: cannot register the exit handler: a rank "
                    "that exits without td_finalize may abort in UCX");
    }
}

static ucs_memory_type_t
ucs_mem(td_mem_type_t m)
{
    return m == TD_MEM_CUDA ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST;
}

/* ---- completion of sends ---------------------------------------------- */

/* X += 1 for a counter only the calling thread writes. */
#define BUMP(x) __atomic_store_n(&(x), (x) + 1, __ATOMIC_RELEASE)

/* A small message's op (RPC's calls and replies: ~200 bytes) is allocated
 * at this size, and the last one freed is kept for the next send
 * (tp->op_spare; exchange to take, compare-and-swap to put back: the
 * taker owns it): a malloc and a free less on every send. */
#define OP_SPARE_BYTES 512

static send_op_t *
op_new(td_transport_t *tp, size_t bytes)
{
    send_op_t *op = NULL;

    if (bytes <= OP_SPARE_BYTES) {
        op = atomic_exchange_explicit(&tp->op_spare, NULL,
                                      memory_order_acquire);
        if (op == NULL) {
            op = malloc(OP_SPARE_BYTES);
        }
        if (op != NULL) {
            op->spare_size = 1;
        }
        return op;
    }
    op = malloc(bytes);
    if (op != NULL) {
        op->spare_size = 0;
    }
    return op;
}

static void
op_free(td_transport_t *tp, send_op_t *op)
{
    void *expected = NULL;

    if (!op->spare_size ||
        !atomic_compare_exchange_strong_explicit(&tp->op_spare, &expected,
                                                 op, memory_order_release,
                                                 memory_order_relaxed)) {
        free(op);
    }
}

static inline const char *peer_fate(const td_transport_t *tp, int rank);

static void
op_finish(td_transport_t *tp, send_op_t *op, td_status_t status)
{
    if (status != TD_OK) {
        const char *fate = status == TD_ERR_PEER ? peer_fate(tp, op->dst)
                                                 : NULL;    /* L12 */

        td_error(status, "transport: send to rank %d failed: %s", op->dst,
                 op->why != NULL ? op->why
                 : fate != NULL ? fate
                 : status == TD_ERR_PEER ? "the peer died or is unreachable"
                                         : td_strerror(status));
        free(op->why);
    }
    if (status == TD_OK && !op->faulted) {
        BUMP(tp->n_sent);
    }
    if (op->cb != NULL) {
        op->cb(op->arg, status);
    }
    op_free(tp, op);
    BUMP(tp->completed);
}

/* Report completions after ucp_worker_progress returns, never inside a
 * UCX callback, so a user callback may post a new send at once. */
static void
op_defer(td_transport_t *tp, send_op_t *op, td_status_t status)
{
    op->status = status;
    op->next = tp->done_head;
    tp->done_head = op;
}

/* OP at the end of the list HEAD..TAIL (the local, parked and shared
 * queues). */
static inline void
op_append(send_op_t **head, send_op_t **tail, send_op_t *op)
{
    op->next = NULL;
    if (*tail != NULL) {
        (*tail)->next = op;
    } else {
        *head = op;
    }
    *tail = op;
}

static void offer_sent(td_transport_t *tp, send_op_t *op, td_status_t st);
static void offers_fail(td_transport_t *tp, int rank);
static void mbox_offer(td_transport_t *tp, int dst);
static int  mbox_send(td_transport_t *tp, send_op_t *op);
static int  mbox_drain(td_transport_t *tp, int src);
static int  mbox_poll(td_transport_t *tp);

static td_status_t
status_from_ucs(ucs_status_t s)
{
    switch (s) {
    case UCS_OK:
        return TD_OK;
    case UCS_ERR_CANCELED:
        return TD_ERR_CANCELED;
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_REJECTED:
        return TD_ERR_PEER;
    default:
        return TD_ERR_TRANSPORT;
    }
}

static void
send_cb(void *request, ucs_status_t status, void *user_data)
{
    send_op_t *op = user_data;

    td_status_t st = status_from_ucs(status);

    op->tp->peers[op->dst].inflight--;
    /* a send cut by ep_fail's forced close: the peer died (not a cancel) */
    if (st != TD_OK && op->tp->peers[op->dst].failed) {
        st = TD_ERR_PEER;
    }
    if (op->offering) {
        offer_sent(op->tp, op, st);               /* O3 */
    } else {
        op_defer(op->tp, op, st);
    }
    ucp_request_free(request);
}

/* ---- endpoints --------------------------------------------------------- */

/* Close EP, once RANK's, by force (token holder): force mode completes at
 * once or soon, without talking to the peer; an error UCX reports for it
 * later is ignored (R2). */
static void
ep_close_force(td_transport_t *tp, int rank, ucp_ep_h ep)
{
    ucp_request_param_t prm = { .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                .flags = UCP_EP_CLOSE_FLAG_FORCE };
    void *req;

    tp->peers[rank].dead_ep = ep;                 /* R2 */
    req = ucp_ep_close_nbx(ep, &prm);
    if (UCS_PTR_IS_PTR(req)) {
        ucp_request_free(req);
    }
}

/* How a peer is failed (peer_fail). */
enum {
    FAIL_LOST,      /* UCX reported it, its process exited */
    FAIL_DROP,      /* this rank's liveness check dropped it (L3, L12) */
    FAIL_TOLD       /* it dropped this rank and said so (L12) */
};

/* Fail peer RANK (token holder), say WHY: its endpoint EP is closed by
 * force, except one this rank drops with nothing of ours in it, which is
 * kept to tell that peer (L12). */
static void
peer_fail(td_transport_t *tp, int rank, ucp_ep_h ep, const char *why,
          int how)
{
    peer_t *p = &tp->peers[rank];

    if (p->failed) {
        return;
    }
    __atomic_store_n(&p->failed, 1, __ATOMIC_RELAXED);
    if (p->parked > 0) {
        /* L13: sends parked on its wire-up fail next round */
        __atomic_store_n(&tp->addr_news, 1, __ATOMIC_SEQ_CST);
    }
    p->wiring = 0;
    offers_fail(tp, rank);                        /* O3 */
    p->mbox_dead = 1;                             /* X5 */
    td__mbox_peer_dead(&tp->mb, rank);
    /* without an endpoint: being closed at shutdown (do not close twice),
     * unless told through UCX's own endpoint, with none of ours (L12) */
    if (p->ep == NULL && (how != FAIL_TOLD || tp->closing)) {
        return;
    }
    if (p->ep != NULL) {
        p->ep = NULL;
        if (how == FAIL_DROP && p->inflight == 0 && p->rx_inflight == 0 &&
            p->linger_ep == NULL) {               /* L14 */
            p->linger_ep = ep;                    /* L12: kept, unused */
            td_log_debug("transport: rank %d: its endpoint kept, to tell "
                         "it (L12)", rank);
        } else {
            if (how == FAIL_DROP) {
                td_log_debug("transport: rank %d: its endpoint closed by "
                             "force: %d sends of ours, %d of its bodies "
                             "in UCX (L12, L14)", rank, p->inflight,
                             p->rx_inflight);
            }
            ep_close_force(tp, rank, ep);
        }
    }
    if (how == FAIL_DROP) {
        p->dropped = 1;                           /* L12 */
        p->told = 0;
    }
    td_error(TD_ERR_PEER, how == FAIL_TOLD ? "transport: rank %d %s"
             : "transport: rank %d failed: %s", rank, why);
    if (tp->params.peer_failed != NULL) {
        /* L12: a peer that dropped this rank lives on (TD_ERR_STATE) */
        tp->params.peer_failed(tp->params.peer_failed_arg, rank,
                               how == FAIL_TOLD ? TD_ERR_STATE : TD_ERR_PEER);
    }
}

/* Fail peer RANK as UCX reported it (token holder). */
static void
ep_fail(td_transport_t *tp, int rank, ucp_ep_h ep, const char *why)
{
    peer_fail(tp, rank, ep, why, FAIL_LOST);
}

/* L12: RANK's endpoint kept since this rank dropped it is closed by
 * force (UCX reported it failed: that peer closed its side, or died; a
 * revive; shutdown). Token holder. */
static void
linger_close(td_transport_t *tp, int rank)
{
    ucp_ep_h ep = tp->peers[rank].linger_ep;

    if (ep != NULL) {
        tp->peers[rank].linger_ep = NULL;
        ep_close_force(tp, rank, ep);
    }
}

/* L12: RANK dropped this rank and said so (its fate, if so): why, for an
 * error text. NULL when not. Any thread. */
static inline const char *
peer_fate(const td_transport_t *tp, int rank)
{
    return __atomic_load_n(&tp->peers[rank].fated, __ATOMIC_ACQUIRE)
           ? tp->peers[rank].fate : NULL;
}

/* The error of a call to RANK, failed: what became of it (L12). */
static td_status_t
failed_error(const td_transport_t *tp, int rank)
{
    const char *fate = peer_fate(tp, rank);

    return fate != NULL
           ? td_error(TD_ERR_PEER, "transport: rank %d %s", rank, fate)
           : td_error(TD_ERR_PEER, "transport: rank %d has failed", rank);
}

static void
ep_error_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    td_transport_t *tp = ((void **)arg)[0];
    int rank = (int)(intptr_t)((void **)arg)[1];

    if (ep == tp->peers[rank].linger_ep) {
        td_log_debug("transport: the endpoint kept for rank %d failed: %s",
                     rank, ucs_status_string(status));
        linger_close(tp, rank);                 /* L12: its use is over */
        return;
    }
    if ((tp->peers[rank].ep != NULL && tp->peers[rank].ep != ep) ||
        ep == tp->peers[rank].dead_ep) {
        return;     /* R2: the endpoint of a process this rank had before */
    }
    ep_fail(tp, rank, ep, ucs_status_string(status));
}

/* L5 (token holder): every TD_TRANSPORT_LIVENESS_S, a peer we hold an
 * endpoint to whose process exited (params.peer_gone) is failed like a
 * keepalive error. live_tick (L1-L4) watches the peers of other hosts. */
static int
peer_gone_check(td_transport_t *tp, int r)
{
    peer_t *p = &tp->peers[r];

    if (!p->tried || p->failed || tp->params.peer_gone == NULL ||
        !tp->params.peer_gone(tp->params.peer_gone_arg, r)) {
        return p->failed;
    }
    if (p->ep != NULL) {
        ep_fail(tp, r, p->ep, "its process exited");
        return 1;
    }
    /* connecting failed (its shared memory gone with it): no endpoint to
     * close, but what waits for it must learn it died */
    __atomic_store_n(&p->failed, 1, __ATOMIC_RELAXED);
    td_error(TD_ERR_PEER, "transport: rank %d failed: its process exited",
             r);
    if (tp->params.peer_failed != NULL) {
        tp->params.peer_failed(tp->params.peer_failed_arg, r, TD_ERR_PEER);
    }
    return 1;
}

/* Connecting to R failed: a peer of this host that is exiting (its
 * shared memory already gone) may need longer to read as exited: its
 * last threads tear down its address space first, and a large one (an
 * ASan build's) on a loaded machine took over 0.1 s (CI: the error was
 * then "transport error", not the peer's death). Rare (a failed
 * connect): the token holder waits up to 1 s for a peer of this host,
 * and asks once about one elsewhere (its process cannot be watched). */
#define PEER_GONE_WAIT_MS 1000

static int
peer_gone_wait(td_transport_t *tp, int r)
{
    int same = tp->params.same_host != NULL &&
               tp->params.same_host(tp->params.resolve_arg, r);

    for (int i = 0; i < PEER_GONE_WAIT_MS / 2; i++) {
        struct timespec ts = { 0, 2000000 };

        if (peer_gone_check(tp, r)) {
            return 1;
        }
        if (!same) {
            return 0;
        }
        nanosleep(&ts, NULL);
    }
    return 0;
}

static void
peers_liveness(td_transport_t *tp)
{
    double now;

    if (tp->params.peer_gone == NULL) {
        return;
    }
    now = td_now_s();
    if (now - tp->gone_last < TD_TRANSPORT_LIVENESS_S) {
        return;
    }
    tp->gone_last = now;
    for (int r = 0; r < tp->params.world_size; r++) {
        (void)peer_gone_check(tp, r);
    }
}

/* The endpoint arguments: a pair (tp, rank) per rank, kept for the
 * transport's life. */
static void **ep_args;

static int64_t live_now_ns(void);

/* RANK, connected (peer_connect asked params.same_host), runs on this
 * host. Token holder. */
static int
peer_local(td_transport_t *tp, int r)
{
    return tp->peers[r].host == 1;
}

/* TODIST_TEST_STOP_CONNECT=R, for tests only: world rank R stops its
 * whole process (SIGSTOP; the test sends SIGCONT) right after it made
 * its first endpoint to a peer on another host, before UCX could send
 * that endpoint's wire-up: a rank that lost the CPU as its endpoints
 * were being made (tests/hosts/test_hosts_dropped.sh). */
static void
connect_test_stop(const td_transport_t *tp)
{
    static int done;
    const char *s = getenv("TODIST_TEST_STOP_CONNECT");

    if (!done && s != NULL && *s != '\0' && atoi(s) == tp->params.rank) {
        done = 1;
        (void)kill(getpid(), SIGSTOP);
    }
}

static void wire_probe(td_transport_t *tp, int dst, ucp_ep_h ep);

/* L11: the resolver thread fetches the addresses the token holder
 * asked for (peer_ready), one at a time, with no lock of ours held, and
 * wakes the holder as each fetch ends. */
static void *
resolver_main(void *arg)
{
    td_transport_t *tp = arg;

    pthread_mutex_lock(&tp->res_lock);
    for (;;) {
        peer_t *p = NULL;
        void *addr = NULL;
        size_t len = 0;
        char *why = NULL;
        unsigned gen;
        td_status_t st;
        int r;

        while (!tp->res_stop && tp->res_wanted == 0) {
            pthread_cond_wait(&tp->res_cond, &tp->res_lock);
        }
        if (tp->res_stop) {
            break;
        }
        for (r = 0; r < tp->params.world_size; r++) {
            if (tp->peers[r].addr_state == ADDR_WANTED) {
                p = &tp->peers[r];
                break;
            }
        }
        if (p == NULL) {
            tp->res_wanted = 0;         /* a revive took them back */
            continue;
        }
        tp->res_wanted--;
        p->addr_state = ADDR_FETCHING;
        gen = p->addr_gen;
        pthread_mutex_unlock(&tp->res_lock);
        st = tp->params.resolve(tp->params.resolve_arg, r, &addr, &len);
        if (st != TD_OK) {
            why = strdup(td_last_error());
        }
        pthread_mutex_lock(&tp->res_lock);
        if (p->addr_gen != gen || p->addr_state != ADDR_FETCHING) {
            free(addr);                 /* a revive: the old process's */
            free(why);
        } else if (st == TD_OK) {
            p->addr = addr;
            p->addr_len = len;
            p->addr_state = ADDR_READY;
        } else {
            p->addr_status = st;
            p->addr_why = why;
            p->addr_state = ADDR_FAILED;
        }
        /* the holder looks at its parked sends again, whatever came */
        __atomic_store_n(&tp->addr_news, 1, __ATOMIC_SEQ_CST);
        worker_signal(tp);
    }
    pthread_mutex_unlock(&tp->res_lock);
    return NULL;
}

/* L11, the slow part of peer_ready: is DST's address fetched (or its
 * fetch failed)? If not, it is asked for. */
static int
peer_ready_slow(td_transport_t *tp, int dst)
{
    peer_t *p = &tp->peers[dst];
    int ready;

    if (p->parked > 0) {
        return 0;       /* they go first, once the address came (unpark) */
    }
    pthread_mutex_lock(&tp->res_lock);
    if (p->addr_state == ADDR_NONE && tp->res_started == 0) {
        tp->res_started = pthread_create(&tp->res_thread, NULL,
                                         resolver_main, tp) == 0 ? 1 : -1;
        if (tp->res_started < 0) {
            td_log_warn("transport: rank %d: no resolver thread: addresses "
                        "are fetched by the token holder", tp->params.rank);
        }
    }
    if (p->addr_state == ADDR_NONE && tp->res_started > 0) {
        p->addr_state = ADDR_WANTED;
        tp->res_wanted++;
        pthread_cond_signal(&tp->res_cond);
    }
    ready = p->addr_state == ADDR_READY || p->addr_state == ADDR_FAILED ||
            (p->addr_state == ADDR_NONE && tp->res_started < 0);
    pthread_mutex_unlock(&tp->res_lock);
    return ready;
}

/* L11: may the token holder call peer_connect on DST now without
 * waiting for the store? Yes when it has an endpoint, has failed, no
 * endpoint will be made (E1), or its address was fetched; otherwise the
 * address is asked for and the caller parks (or drops) what needed it.
 * Token holder. */
static inline int
peer_ready(td_transport_t *tp, int dst)
{
    const peer_t *p = &tp->peers[dst];

    if (p->ep != NULL || p->failed || tp->closing ||
        tp->params.resolve == NULL) {
        return 1;
    }
    return peer_ready_slow(tp, dst);
}

/* The address peer_ready saw fetched (or the resolver's answer now, where
 * there is no resolver thread); the caller frees it. */
static td_status_t
peer_address(td_transport_t *tp, int dst, void **addr_p, size_t *len_p)
{
    peer_t *p = &tp->peers[dst];
    td_status_t st = TD_OK;
    int own = 0;

    pthread_mutex_lock(&tp->res_lock);
    switch (p->addr_state) {
    case ADDR_READY:
        *addr_p = p->addr;
        *len_p = p->addr_len;
        p->addr = NULL;
        p->addr_state = ADDR_NONE;      /* asked again if connecting fails */
        break;
    case ADDR_FAILED:
        /* every send parked for it fails alike; addr_arrived asks
         * again for the next ones */
        st = td_error(p->addr_status, "%s", p->addr_why != NULL ?
                      p->addr_why : "transport: no address");
        break;
    case ADDR_NONE:
        own = tp->res_started < 0;
        if (!own) {
            st = td_error(TD_ERR_STATE, "transport: rank %d's address was "
                          "not asked for", dst);
        }
        break;
    default:
        st = td_error(TD_ERR_STATE, "transport: rank %d's address is still "
                      "being fetched", dst);
        break;
    }
    pthread_mutex_unlock(&tp->res_lock);
    if (own) {
        st = tp->params.resolve(tp->params.resolve_arg, dst, addr_p, len_p);
    }
    return st;
}

/* L16: UCX has no transport to DST: failed as lost, the reason kept as
 * its fate. Token holder, outside UCX callbacks, no endpoint to DST. */
static void
peer_unreachable(td_transport_t *tp, int dst)
{
    peer_t *p = &tp->peers[dst];
    const char *tls = getenv("UCX_TLS");

    if (p->failed) {
        return;
    }
    snprintf(p->fate, sizeof(p->fate), "is unreachable: UCX has no "
             "transport to it (%s; UCX_TLS=%s)",
             ucs_status_string(UCS_ERR_UNREACHABLE),
             tls != NULL ? tls : "unset");
    __atomic_store_n(&p->fated, 1, __ATOMIC_RELEASE);
    /* (the runtime's peer_failed says it as an error, with the host) */
    td_log_info("transport: rank %d: rank %d %s", tp->params.rank, dst,
                p->fate);
    /* no endpoint: peer_fail does the bookkeeping (parked sends, offers,
     * mailbox) and returns before telling; told here, as L5 does */
    peer_fail(tp, dst, NULL, p->fate, FAIL_LOST);
    td_error(TD_ERR_PEER, "transport: rank %d %s", dst, p->fate);
    if (tp->params.peer_failed != NULL) {
        tp->params.peer_failed(tp->params.peer_failed_arg, dst, TD_ERR_PEER);
    }
}

static td_status_t
peer_connect(td_transport_t *tp, int dst, ucp_ep_h *ep_p)
{
    peer_t *p = &tp->peers[dst];
    void *addr = NULL;
    size_t len = 0;
    ucp_ep_params_t ep_params;
    ucs_status_t s;
    td_status_t status;

    if (p->ep != NULL) {
        *ep_p = p->ep;
        return TD_OK;
    }
    p->unreach = 0;             /* L16: said by this try's ucp_ep_create */
    if (p->failed) {
        return failed_error(tp, dst);
    }
    if (tp->closing) {                                            /* E1 */
        return td_error(TD_ERR_CANCELED, "transport: rank %d: no new "
                        "endpoint to rank %d while the endpoints close",
                        tp->params.rank, dst);
    }
    if (tp->params.resolve == NULL) {
        return td_error(TD_ERR_STATE, "transport: no address resolver for "
                        "rank %d", dst);
    }
    status = peer_address(tp, dst, &addr, &len);              /* L11 */
    if (status != TD_OK) {
        return status;
    }
    p->tried = 1;                       /* L5: its liveness is asked */
    memset(&ep_params, 0, sizeof(ep_params));
    ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                           UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                           UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep_params.address = addr;
    ep_params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep_params.err_handler.cb = ep_error_cb;
    ep_params.err_handler.arg = &ep_args[2 * dst];
    s = ucp_ep_create(tp->worker, &ep_params, &p->ep);
    free(addr);
    if (s == UCS_OK && p->ep == p->dead_ep) {
        p->dead_ep = NULL;       /* R2: UCX reused the freed handle */
    }
    if (s != UCS_OK) {
        p->ep = NULL;
        p->unreach = s == UCS_ERR_UNREACHABLE;                  /* L16 */
        return td_error(TD_ERR_TRANSPORT, "transport: cannot connect to rank "
                        "%d: %s", dst, ucs_status_string(s));
    }
    /* L1, O1: the resolver has just learnt the peer's host. */
    p->host = tp->params.same_host != NULL &&
              tp->params.same_host(tp->params.resolve_arg, dst) ? 1 : 2;
    p->remote = tp->live_ns > 0 && tp->params.same_host != NULL &&
                p->host == 2;
    p->heard_w = tp->live_watched_ns;
    p->rx_seen = p->rx_count;
    p->ping_w = -1;
    p->busy_told = 0;
    *ep_p = p->ep;
    p->ep_gen++;
    p->wiring = 0;
    if (p->host == 2) {
        connect_test_stop(tp);
    }
    if (p->remote) {
        wire_probe(tp, dst, p->ep);                             /* L13 */
    }
    return TD_OK;
}

/* After peer_connect to DST failed with STATUS (token holder, outside
 * UCX callbacks): a peer found gone is failed (L5, TD_ERR_PEER), one UCX
 * cannot reach is failed as such (L16, TD_ERR_PEER naming why); else
 * STATUS, and the next send tries again. */
static td_status_t
connect_failed(td_transport_t *tp, int dst, td_status_t status)
{
    if (status != TD_ERR_TRANSPORT) {
        return status;
    }
    if (peer_gone_wait(tp, dst)) {
        return TD_ERR_PEER;             /* L5: it could not be reached */
    }
    if (tp->peers[dst].unreach) {
        peer_unreachable(tp, dst);                              /* L16 */
        return failed_error(tp, dst);
    }
    return status;
}

/* ---- liveness between hosts (L1-L4) ------------------------------------ */

static int64_t
live_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void
live_sent_cb(void *request, ucs_status_t status, void *user_data)
{
    free(user_data);
    ucp_request_free(request);
}

/* Our header's fixed part (WIRE_FIXED bytes: version, flags 0, handler
 * ID, our rank, HEADER_LEN, N_BODIES, DST's job tag) at W. Every byte is
 * written: no zeroing first. The one encoding of it for op_build,
 * lean_send and internal_send_on. */
static inline void
wire_fill(const td_transport_t *tp, uint8_t *w, int dst, uint16_t id,
          size_t header_len, size_t n_bodies)
{
    w[0] = WIRE_VERSION;
    w[1] = 0;
    w[2] = id >> 8;
    w[3] = id & 0xff;
    td_put_be32(w + 4, (uint32_t)tp->params.rank);
    td_put_be32(w + 8, (uint32_t)header_len);
    td_put_be32(w + 12, (uint32_t)n_bodies);
    memcpy(w + TAG_OFF, tp->tag_to + (size_t)dst * TAG_LEN, TAG_LEN);
}

/* One body's entry (WIRE_BODY bytes) at B: length, memory type, 7 zero
 * bytes. */
static inline void
wire_body(uint8_t *b, size_t len, td_mem_type_t mem)
{
    td_put_be64(b, (uint64_t)len);
    memset(b + 8, 0, WIRE_BODY - 8);    /* one store, then the type */
    b[8] = (uint8_t)mem;
}

/* Send the LEN bytes of MSG to DST's transport-internal handler ID
 * (LIVE_ID, CMA_ID) on EP, outside the counted sends. Token holder. */
static void
internal_send_on(td_transport_t *tp, ucp_ep_h ep, int dst, uint16_t id,
                 const uint8_t *msg, size_t len)
{
    ucp_request_param_t prm;
    uint8_t *w;
    void *req;

    if ((w = malloc(WIRE_FIXED + len)) == NULL) {
        return;
    }
    wire_fill(tp, w, dst, id, len, 0);
    memcpy(w + WIRE_FIXED, msg, len);
    memset(&prm, 0, sizeof(prm));
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                       UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
    prm.cb.send = live_sent_cb;
    prm.user_data = w;
    prm.flags = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER;
    req = ucp_am_send_nbx(ep, TD_AM_ID, w, WIRE_FIXED + len, NULL, 0, &prm);
    if (!UCS_PTR_IS_ERR(req)) {
        tp->peers[dst].am_tx++;                                 /* X3 */
    }
    if (!UCS_PTR_IS_PTR(req)) {
        free(w);             /* done at once, or failed (UCX reports it) */
    }
}

/* L13: the wire-up probe sent on endpoint number GEN of RANK. */
typedef struct {
    td_transport_t *tp;
    int             rank;
    unsigned        gen;
    uint8_t         w[];        /* our header, then 'H' */
} probe_t;

static void
probe_sent_cb(void *request, ucs_status_t status, void *user_data)
{
    probe_t *pr = user_data;

    /* Done: UCX had the peer's endpoint id (a reply-flagged message
     * carries it), so its wire-up is through. Failed: the endpoint
     * failed, and the peer with it (its parked sends fail then). */
    if (status == UCS_OK) {
        peer_t *p = &pr->tp->peers[pr->rank];

        if (p->ep_gen == pr->gen && p->wiring == 1 && p->parked > 0) {
            p->wiring = 2;              /* addr_arrived starts them */
            __atomic_store_n(&pr->tp->addr_news, 1, __ATOMIC_SEQ_CST);
        } else if (p->ep_gen == pr->gen && p->wiring == 1) {
            p->wiring = 0;
        }
    }
    free(pr);
    ucp_request_free(request);
}

/* L13: DST's new endpoint EP (to a watched peer) is unproven until a
 * message of ours that needs the peer's endpoint id (reply-flagged)
 * completed on it: send one ('H', ignored by the receiver) and park our
 * sends to DST until then. Token holder. */
static void
wire_probe(td_transport_t *tp, int dst, ucp_ep_h ep)
{
    peer_t *p = &tp->peers[dst];
    ucp_request_param_t prm;
    probe_t *pr;
    void *req;

    if ((pr = malloc(sizeof(*pr) + WIRE_FIXED + 1)) == NULL) {
        return;                 /* unproven: as before L13 */
    }
    pr->tp = tp;
    pr->rank = dst;
    pr->gen = p->ep_gen;
    wire_fill(tp, pr->w, dst, LIVE_ID, 1, 0);
    pr->w[WIRE_FIXED] = 'H';
    memset(&prm, 0, sizeof(prm));
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                       UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
    prm.cb.send = probe_sent_cb;
    prm.user_data = pr;
    prm.flags = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER;
    req = ucp_am_send_nbx(ep, TD_AM_ID, pr->w, WIRE_FIXED + 1, NULL, 0,
                          &prm);
    if (!UCS_PTR_IS_ERR(req)) {
        p->am_tx++;                                             /* X3 */
    }
    if (UCS_PTR_IS_PTR(req)) {
        p->wiring = 1;          /* until probe_sent_cb */
    } else {
        free(pr);               /* done at once (wired), or failed (UCX
                                 * reports it): nothing to wait for */
    }
}

/* As internal_send_on, to DST's endpoint (made if need be), else to
 * REPLY (the reply endpoint of the message answered, or NULL) while
 * DST's address is being fetched (L11). */
static void
internal_send(td_transport_t *tp, int dst, uint16_t id, const uint8_t *msg,
              size_t len, ucp_ep_h reply)
{
    ucp_ep_h ep;

    if (!peer_ready(tp, dst)) {
        if (reply != NULL) {
            internal_send_on(tp, reply, dst, id, msg, len);
        }
        return;
    }
    if (peer_connect(tp, dst, &ep) != TD_OK) {
        return;              /* a dead or unknown peer: nothing to tell */
    }
    internal_send_on(tp, ep, dst, id, msg, len);
}

/* The reply endpoint UCX gives a receive callback, or NULL. */
static ucp_ep_h
reply_ep_of(const ucp_am_recv_param_t *param)
{
    return (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ?
           param->reply_ep : NULL;
}

/* Send KIND ('P' ping, 'O' its answer) to DST (L3). Token holder. */
static void
live_send(td_transport_t *tp, int dst, uint8_t kind)
{
    internal_send(tp, dst, LIVE_ID, &kind, 1, NULL);
}

/* L9: answer SRC's ping from the receive callback without making an
 * endpoint: its own, else the reply endpoint UCX gives the callback
 * (pings go by internal_send_on, with UCP_AM_SEND_FLAG_REPLY; only S2's
 * lean data sends omit it), else none (L7
 * then finds the host answering: busy, not lost). Making one would call
 * the resolver, which may wait seconds on the store (and on a lock a
 * thread holds across store I/O) while no progress is made: every
 * collective of this rank then timed out (issue 30, test_spank_hosts
 * 17/18 under load). */
static void
live_answer(td_transport_t *tp, int src, const ucp_am_recv_param_t *param)
{
    peer_t *p = &tp->peers[src];
    ucp_ep_h ep = p->ep;
    uint8_t kind = 'O';

    if (ep == NULL && !p->failed && !tp->closing &&
        (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP)) {
        ep = param->reply_ep;
    }
    if (ep != NULL) {
        internal_send_on(tp, ep, src, LIVE_ID, &kind, 1);
    }
}

/* One tick (L2-L4, L6-L8): note who was heard, ping the quiet, fail the
 * silent whose host does not answer either. */
static void
live_tick(td_transport_t *tp)
{
    int64_t now = live_now_ns(), step, w;

    __atomic_store_n(&tp->live_due, 0, __ATOMIC_RELAXED);
    if (now < tp->live_next_ns) {
        return;
    }
    tp->live_next_ns = now + LIVE_TICK_NS;
    /* L6: the watched clock advances by the time since the last tick, at
     * most a sixth of TODIST_LIVENESS: time this rank did not look (its
     * process stopped or starved, its token holder held up) is not
     * silence of the peers. */
    step = tp->live_last_ns != 0 ? now - tp->live_last_ns : 0;
    if (step > tp->live_ns / 6) {
        step = tp->live_ns / 6;
    }
    tp->live_last_ns = now;
    w = tp->live_watched_ns += step;
    for (int r = 0; r < tp->params.world_size; r++) {
        peer_t *p = &tp->peers[r];
        int64_t quiet;

        if (!p->remote || p->ep == NULL || p->failed) {
            continue;
        }
        if (p->rx_count != p->rx_seen) {
            p->rx_seen = p->rx_count;
            p->heard_w = w;
            p->ping_w = -1;
            p->busy_told = 0;
            continue;
        }
        quiet = w - p->heard_w;
        /* L6: failed only once a ping had a third of the time to come
         * back, all of it watched */
        if (quiet >= tp->live_ns && p->ping_w >= 0 &&
            w - p->ping_w >= tp->live_ns / 3) {
            char why[200], heard[48] = "";
            /* L7: half the period, but at least 1.5 s (L8's probes come
             * a second apart), never more than the period */
            int64_t heard_max = tp->live_ns / 2;
            int ms = tp->params.peer_heard != NULL
                     ? tp->params.peer_heard(tp->params.resolve_arg, r) : -1;

            if (heard_max < LIVE_HEARD_MIN_NS) {
                heard_max = LIVE_HEARD_MIN_NS;
            }
            if (heard_max > tp->live_ns) {
                heard_max = tp->live_ns;
            }

            if (ms >= 0 && (int64_t)ms * 1000000 < heard_max) {
                /* L7: its host acknowledged our pings: it is alive, only
                 * its process does not answer (stopped, starved, busy) */
                if (!p->busy_told) {
                    p->busy_told = 1;
                    td_log_info("transport: rank %d answered nothing for "
                                "%.1f s, but its host acknowledged our "
                                "data %d ms ago: busy, not lost", r,
                                (double)quiet * 1e-9, ms);
                }
                p->heard_w = w;
                p->ping_w = -1;
                continue;
            }
            if (ms >= 0) {
                snprintf(heard, sizeof(heard), ", its host nothing for "
                         "%.1f s", ms * 1e-3);
            }
            snprintf(why, sizeof(why), "unreachable: on another host, it "
                     "answered nothing for %.1f s%s (TODIST_LIVENESS=%g)",
                     (double)quiet * 1e-9, heard,
                     (double)tp->live_ns * 1e-9);
            td_log_error("transport: rank %d %s", r, why);
            p->drop_quiet_ms = (uint32_t)(quiet / 1000000);
            peer_fail(tp, r, p->ep, why, FAIL_DROP);     /* L12 */
        } else if (quiet >= tp->live_ns / 3 &&
                   (p->ping_w < 0 || w - p->ping_w >= tp->live_ns / 3)) {
            if (p->ping_w < 0 && tp->params.peer_heard != NULL) {
                /* L8: its host's kernel is made to answer from now on */
                (void)tp->params.peer_heard(tp->params.resolve_arg, r);
            }
            p->ping_w = w;
            live_send(tp, r, 'P');
        }
    }
}


/* ---- bodies offered in place (O1-O5) ----------------------------------- */

/* O2: the token a rank of this job with pid PID holds: the first 8 bytes
 * of HMAC-SHA256(cma_key, be32 pid), never 0. */
static uint64_t
cma_token_for(const td_transport_t *tp, uint32_t pid)
{
    uint8_t msg[4], mac[EVP_MAX_MD_SIZE];
    unsigned int mlen = 0;
    uint64_t t;

    td_put_be32(msg, pid);
    HMAC(EVP_sha256(), tp->cma_key, (int)sizeof(tp->cma_key), msg,
         sizeof(msg), mac, &mlen);
    t = td_get_be64(mac);
    return t != 0 ? t : 1;
}

/* Tell DST what became of its offer SEQ (O3). Token holder. */
static void
offer_answer(td_transport_t *tp, int dst, uint64_t seq, uint8_t ans,
             ucp_ep_h reply)
{
    uint8_t m[9];

    td_put_be64(m, seq);
    m[8] = ans;
    internal_send(tp, dst, CMA_ID, m, sizeof(m), reply);
}

/* O1: may OP's bodies be offered instead of sent? */
static int
offer_wanted(td_transport_t *tp, const send_op_t *op)
{
    size_t min = tp->inplace_min[op->id];

    return min > 0 && op->n_bodies > 0 && !op->no_offer &&
           op->mem == TD_MEM_HOST && op->total >= min &&
           op->dst != tp->params.rank && !tp->peers[op->dst].refused &&
           peer_local(tp, op->dst);
}

/* Take OP off tp->offers; 1 when it was there. */
static int
offer_unlink(td_transport_t *tp, send_op_t *op)
{
    for (send_op_t **pp = &tp->offers; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == op) {
            *pp = op->next;
            return 1;
        }
    }
    return 0;
}

/* OP is off the list, sent and answered: finish it, or (refused) send it
 * again with its bodies (O2, O3). */
static void
offer_settle(td_transport_t *tp, send_op_t *op)
{
    char why[160];

    op->offering = 0;
    switch (op->answer) {
    case ANS_READ:
        op_defer(tp, op, TD_OK);
        break;
    case ANS_REFUSED:
    case ANS_LATER:
        /* started again after this progress call (drain_queue), as a
         * callback's send is */
        op->no_offer = 1;
        op->wire[1] &= (uint8_t)~WIRE_F_OFFER;
        op_append(&tp->local_head, &tp->local_tail, op);
        break;
    case ANS_PEER:
        op_defer(tp, op, TD_ERR_PEER);
        break;
    default:
        snprintf(why, sizeof(why), "rank %d could not read the %zu bytes "
                 "offered in place", op->dst, op->total);
        op->why = strdup(why);
        op_defer(tp, op, TD_ERR_TRANSPORT);
        break;
    }
}

/* UCX completed OP's offer with ST (send_cb). */
static void
offer_sent(td_transport_t *tp, send_op_t *op, td_status_t st)
{
    if (st != TD_OK) {
        (void)offer_unlink(tp, op);
        op->offering = 0;
        op_defer(tp, op, st);
        return;
    }
    op->hdr_done = 1;
    if (op->answered) {
        offer_settle(tp, op);
    }
}

/* Offer OP's bodies to its peer over EP (O1, O3). */
static void
offer_start(td_transport_t *tp, send_op_t *op, ucp_ep_h ep)
{
    ucp_request_param_t prm;
    uint8_t *o = op->wire + op->wire_len;
    void *req;

    op->seq = ++tp->offer_seq;
    td_put_be32(o, (uint32_t)getpid());
    memset(o + 4, 0, 4);
    td_put_be64(o + 8, (uint64_t)(uintptr_t)&tp->cma_token);
    td_put_be64(o + 16, tp->cma_token);
    td_put_be64(o + 24, op->seq);
    for (size_t i = 0; i < op->n_bodies; i++) {
        td_put_be64(o + OFFER_FIXED + i * OFFER_BODY,
                    (uint64_t)(uintptr_t)op->iov[i].buffer);
    }
    op->wire[1] |= WIRE_F_OFFER;
    op->offering = 1;
    op->hdr_done = 0;
    op->answered = 0;
    op->next = tp->offers;
    tp->offers = op;
    memset(&prm, 0, sizeof(prm));
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                       UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
    prm.cb.send = send_cb;
    prm.user_data = op;
    prm.flags = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER;
    req = ucp_am_send_nbx(ep, TD_AM_ID, op->wire,
                          op->wire_len + OFFER_LEN(op->n_bodies), NULL, 0,
                          &prm);
    if (!UCS_PTR_IS_ERR(req)) {
        tp->peers[op->dst].am_tx++;                             /* X3 */
    }
    if (req == NULL) {
        op->hdr_done = 1;             /* the answer comes later */
    } else if (UCS_PTR_IS_ERR(req)) {
        (void)offer_unlink(tp, op);
        op->offering = 0;
        op_defer(tp, op, status_from_ucs(UCS_PTR_STATUS(req)));
    } else {
        tp->peers[op->dst].inflight++;
    }
}

/* An answer from SRC (CMA_ID): M[LEN] = be64 seq | u8 answer (O4). */
static void
offer_answered(td_transport_t *tp, int src, const uint8_t *m, size_t len)
{
    uint64_t seq;

    if (len != 9) {
        return;
    }
    seq = td_get_be64(m);
    for (send_op_t **pp = &tp->offers; *pp != NULL; pp = &(*pp)->next) {
        send_op_t *op = *pp;

        if (op->seq == seq && op->dst == src) {
            *pp = op->next;
            op->answered = 1;
            op->answer = m[8] <= ANS_LATER ? m[8] : ANS_FAILED;
            if (op->answer == ANS_REFUSED) {
                tp->peers[src].refused = 1;
            }
            if (op->hdr_done) {
                offer_settle(tp, op);
            }
            return;
        }
    }
}

/* RANK failed: its offers fail with TD_ERR_PEER (O3); one UCX has not
 * completed yet finishes in send_cb. */
static void
offers_fail(td_transport_t *tp, int rank)
{
    send_op_t **pp = &tp->offers;

    while (*pp != NULL) {
        send_op_t *op = *pp;

        if (op->dst != rank) {
            pp = &op->next;
            continue;
        }
        *pp = op->next;
        op->answered = 1;
        op->answer = ANS_PEER;
        if (op->hdr_done) {
            offer_settle(tp, op);
        }
    }
}

/* ---- fault injection (TODIST_FAULT, tests only: fault.c) --------------- */

/* The one hook (fault.h F1: only with rules): 1 = OP dropped (done). */
static int
fault_hook(td_transport_t *tp, send_op_t *op)
{
    size_t hoff = WIRE_FIXED + op->n_bodies * WIRE_BODY;
    uint16_t id = (uint16_t)(op->wire[2] << 8 | op->wire[3]);

    int a = td__fault_send(&tp->faults, id, op->dst, op->wire + hoff,
                           td_get_be32(op->wire + 8));

    if (a == TD__FAULT_BREAK) {
        op->faulted = 2;             /* op_start fails it once connected */
        return 0;
    }
    if (a != TD__FAULT_DROP) {
        return 0;
    }
    op->faulted = 1;
    op_defer(tp, op, TD_OK);
    return 1;
}

void
td__transport_set_classifier(td_transport_t *tp, td_transport_classify_fn fn,
                            void *arg)
{
    tp->faults.classify = fn;
    tp->faults.classify_arg = arg;
}

void
td__transport_set_kind(td_transport_t *tp, uint16_t id, const char *kind)
{
    if (id < TD_TRANSPORT_HANDLERS_MAX) {
        tp->faults.id_kind[id] = kind;
    }
}

int
td__transport_fault_roll(td_transport_t *tp, const char *kind)
{
    return td__fault_roll(&tp->faults, kind);
}

/* L11: OP waits for its peer's address, after that peer's other parked
 * sends (token holder). */
static void
op_park(td_transport_t *tp, send_op_t *op)
{
    op_append(&tp->parked_head, &tp->parked_tail, op);
    tp->peers[op->dst].parked++;
}

static void op_start(td_transport_t *tp, send_op_t *op);

/* L11: a fetch ended: the parked sends are started again in the order
 * parked (those whose address is still missing park again, in order),
 * then the peers watched meanwhile are connected. Token holder, outside
 * UCX callbacks. */
static void
addr_arrived(td_transport_t *tp)
{
    send_op_t *list = tp->parked_head;

    __atomic_store_n(&tp->addr_news, 0, __ATOMIC_SEQ_CST);
    tp->parked_head = tp->parked_tail = NULL;
    for (send_op_t *op = list; op != NULL; op = op->next) {
        tp->peers[op->dst].parked = 0;
        if (tp->peers[op->dst].wiring == 2) {
            tp->peers[op->dst].wiring = 0;      /* L13: wired, go */
        }
    }
    while (list != NULL) {
        send_op_t *op = list;

        list = op->next;
        op->next = NULL;
        op_start(tp, op);
    }
    pthread_mutex_lock(&tp->res_lock);
    for (int r = 0; r < tp->params.world_size; r++) {
        peer_t *p = &tp->peers[r];

        if (p->watch_later && (p->ep != NULL || p->failed)) {
            p->watch_later = 0;             /* connected meanwhile */
        } else if (p->watch_later && p->addr_state == ADDR_READY) {
            p->watch_later = 0;             /* connect_watched, next */
            __atomic_store_n(&p->watch, 1, __ATOMIC_RELEASE);
            __atomic_store_n(&tp->watch_pending, 1, __ATOMIC_SEQ_CST);
        } else if (p->watch_later && p->addr_state == ADDR_FAILED) {
            p->watch_later = 0;
            td_log_warn("transport: rank %d: cannot watch rank %d: %s",
                        tp->params.rank, r, p->addr_why != NULL ?
                        p->addr_why : "no address");
        }
        if (p->addr_state == ADDR_FAILED) {
            free(p->addr_why);          /* told; a later send asks again */
            p->addr_why = NULL;
            p->addr_state = ADDR_NONE;
        }
    }
    pthread_mutex_unlock(&tp->res_lock);
}

/* Start one queued send (token holder, outside UCX callbacks). */
static void
op_start(td_transport_t *tp, send_op_t *op)
{
    ucp_request_param_t prm;
    ucp_ep_h ep = NULL;
    void *buf = NULL, *req;
    size_t count = 0;
    td_status_t status;

    if (tp->peers[op->dst].ep == NULL && !peer_ready(tp, op->dst)) {
        op_park(tp, op);                                        /* L11 */
        return;
    }
    if (tp->faults.n > 0 && fault_hook(tp, op)) {
        return;
    }
    status = peer_connect(tp, op->dst, &ep);
    if (status != TD_OK) {
        status = connect_failed(tp, op->dst, status);      /* L5, L16 */
    }
    if (status == TD_OK && op->faulted == 2) {
        td_error(TD_ERR_TRANSPORT, "transport: TODIST_FAULT broke the "
                 "endpoint to rank %d", op->dst);
        status = TD_ERR_TRANSPORT;
    }
    if (status != TD_OK) {
        op->why = strdup(td_last_error());   /* e.g. the store is gone */
        op_defer(tp, op, status);
        return;
    }
    if (tp->peers[op->dst].wiring) {
        op_park(tp, op);                                        /* L13 */
        return;
    }
    if (tp->mb.on && peer_local(tp, op->dst)) {
        if (!tp->peers[op->dst].mbox_offered) {
            mbox_offer(tp, op->dst);      /* X2 */
        }
        if (tp->mbox_on[op->id] && mbox_send(tp, op)) {
            return;                       /* X1 */
        }
    }
    if (offer_wanted(tp, op)) {
        offer_start(tp, op, ep);          /* O1 */
        return;
    }
    memset(&prm, 0, sizeof(prm));
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                       UCP_OP_ATTR_FIELD_USER_DATA |
                       UCP_OP_ATTR_FIELD_FLAGS |
                       UCP_OP_ATTR_FIELD_MEMORY_TYPE;
    prm.cb.send = send_cb;
    prm.user_data = op;
    prm.flags = UCP_AM_SEND_FLAG_REPLY;
    prm.memory_type = ucs_mem(op->mem);
    if (op->n_bodies == 1) {
        buf = op->iov[0].buffer;
        count = op->iov[0].length;
    } else if (op->n_bodies > 1) {
        prm.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
        prm.datatype = ucp_dt_make_iov();
        buf = op->iov;
        count = op->n_bodies;
    }
    /* Eager up to EAGER_MAX to a peer of this host, up to EAGER_REMOTE_MAX
     * to one known to be on another (a transport without a host map knows
     * neither: UCX chooses). */
    if (op->mem == TD_MEM_HOST) {
        const peer_t *p = &tp->peers[op->dst];
        size_t max = p->host == 1 ? tp->eager_max
                     : tp->params.same_host != NULL ? tp->eager_far : 0;

        if (op->total <= max) {
            prm.flags |= UCP_AM_SEND_FLAG_EAGER;
        }
    }
    req = ucp_am_send_nbx(ep, TD_AM_ID, op->wire, op->wire_len, buf, count,
                          &prm);
    if (!UCS_PTR_IS_ERR(req)) {
        tp->peers[op->dst].am_tx++;                             /* X3 */
    }
    if (req == NULL) {
        op_defer(tp, op, TD_OK);
    } else if (UCS_PTR_IS_ERR(req)) {
        op_defer(tp, op, status_from_ucs(UCS_PTR_STATUS(req)));
    } else {
        tp->peers[op->dst].inflight++;
    }
}

/* ---- receiving ---------------------------------------------------------- */

/* A message counts as received once all of it has landed (or failed), so
 * the join's sums of sent and received messages match only when nothing
 * is still moving. */
static void
recv_finish(recv_op_t *r, td_status_t status)
{
    BUMP(r->tp->n_received);
    if (status != TD_OK) {
        if (status == TD_ERR_PEER && r->tp->peers[r->src].failed) {
            failed_error(r->tp, r->src);    /* names it, and its fate */
        } else {
            td_error(status, "transport: message from rank %d failed: %s",
                     r->src, status == TD_ERR_PEER ? "the sender died"
                                                   : td_strerror(status));
        }
    }
    if (r->done != NULL) {
        r->done(r->done_arg, status, r->src, r->dest, r->n_bodies);
    } else {
        for (size_t i = 0; i < r->n_bodies; i++) {
            if (r->owned[i]) {
                free(r->dest[i].buf);
            }
        }
    }
    if (r->heap) {
        free(r);
    }
}

static void
recv_data_cb(void *request, ucs_status_t status, size_t length,
             void *user_data)
{
    recv_op_t *r = user_data;
    peer_t *p = &r->tp->peers[r->src];
    td_status_t st = status_from_ucs(status);

    p->rx_inflight--;                                           /* L14 */
    /* cut by a forced close (L12, L14): the peer failed, not a cancel,
     * as send_cb says */
    if (st != TD_OK && p->failed) {
        st = TD_ERR_PEER;
    }
    recv_finish(r, st);
    ucp_request_free(request);
}

/* A message's transport header, parsed and checked (wire_parse). */
typedef struct {
    uint16_t      id;
    int           offer;        /* WIRE_F_OFFER: bodies in place (O1) */
    uint32_t      src, ulen, nb;
    size_t        blen[TD_TRANSPORT_BODIES_MAX];
    td_mem_type_t bmem[TD_TRANSPORT_BODIES_MAX];
} wire_hdr_t;

/* Step 1: decode H[HEADER_LENGTH] and check everything against the bytes
 * received (LENGTH of data) before trusting any of it; 0 when it holds. */
static inline int
wire_parse(const td_transport_t *tp, const uint8_t *h, size_t header_length,
           size_t length, wire_hdr_t *w)
{
    size_t total = 0;

    if (header_length < WIRE_FIXED || h[0] != WIRE_VERSION ||
        (h[1] & ~WIRE_F_OFFER) != 0) {
        return -1;
    }
    w->offer = (h[1] & WIRE_F_OFFER) != 0;
    w->id = (uint16_t)(h[2] << 8 | h[3]);
    w->src = td_get_be32(h + 4);
    w->ulen = td_get_be32(h + 8);
    w->nb = td_get_be32(h + 12);
    if (w->id >= TD_TRANSPORT_HANDLERS_MAX ||
        w->src >= (uint32_t)tp->params.world_size ||
        w->ulen > TD_TRANSPORT_HEADER_MAX ||
        w->nb > TD_TRANSPORT_BODIES_MAX || (w->offer && w->nb == 0) ||
        header_length != WIRE_FIXED + (size_t)w->nb * WIRE_BODY + w->ulen +
                         (w->offer ? OFFER_LEN(w->nb) : 0)) {
        return -1;
    }
    for (uint32_t i = 0; i < w->nb; i++) {
        const uint8_t *b = h + WIRE_FIXED + i * WIRE_BODY;

        w->blen[i] = (size_t)td_get_be32(b) << 32 | td_get_be32(b + 4);
        if (b[8] > TD_MEM_CUDA || w->blen[i] > SIZE_MAX - total) {
            return -1;
        }
        w->bmem[i] = (td_mem_type_t)b[8];
        total += w->blen[i];
    }
    /* an offer's bodies stay with the sender (O1) */
    return (w->offer ? length == 0 : total == length) ? 0 : -1;
}

/* Step 1b: the job tag (derived from TODIST_JOB_TOKEN) matches the one the
 * claimed sender's messages carry, compared in constant time; a wrong one
 * is dropped and counted, and logged at powers of two (loud, no flood). */
static inline int
tag_ok(td_transport_t *tp, const uint8_t *h, const wire_hdr_t *w)
{
    size_t n;

    if (CRYPTO_memcmp(h + TAG_OFF, tp->tag_from + (size_t)w->src * TAG_LEN,
                      TAG_LEN) == 0) {
        return 1;
    }
    n = tp->rejected + 1;
    BUMP(tp->rejected);
    if ((n & (n - 1)) == 0) {
        td_log_warn("transport: dropped %zu message(s) with a wrong job "
                    "tag (claiming rank %u: not from this job, or a "
                    "different TODIST_JOB_TOKEN)", n, w->src);
    }
    return 0;
}

/* Step 2: the handler names the destinations of the bodies, or (EAGER:
 * the bodies' bytes, when they came with the message from another host)
 * takes them itself (S1): 1 then, and the message is done. */
static inline int
deliver(td_transport_t *tp, const uint8_t *h, wire_hdr_t *w, recv_op_t *r,
        const void *eager)
{
    td_transport_rx_t rx;

    r->tp = tp;
    r->src = (int)w->src;
    r->n_bodies = w->nb;
    for (uint32_t i = 0; i < w->nb; i++) {
        r->dest[i].len = w->blen[i];
        r->dest[i].mem = TD_MEM_HOST;
    }
    memset(&rx, 0, sizeof(rx));
    rx.src = (int)w->src;
    rx.handler_id = w->id;
    rx.header = h + WIRE_FIXED + (size_t)w->nb * WIRE_BODY;
    rx.header_len = w->ulen;
    rx.n_bodies = w->nb;
    rx.body_len = w->blen;
    rx.body_mem = w->bmem;
    rx.dest = r->dest;
    rx.eager = eager;
    /* fn is published by a release store after arg (set_handler): an
     * acquire load of it makes arg visible */
    __atomic_load_n(&tp->handlers[w->id].fn, __ATOMIC_ACQUIRE)(
        tp->handlers[w->id].arg, &rx);
    if (rx.taken && eager != NULL) {
        BUMP(tp->n_received);           /* as recv_finish: the join */
        BUMP(tp->n_taken);
        return 1;
    }
    r->done = rx.done;
    r->done_arg = rx.done_arg;
    return 0;
}

/* Step 3: bodies without a destination get a host buffer (handed over);
 * a destination UCX cannot reach fails the message. TD_OK, or the status
 * the message was finished with (the data released). */
static inline td_status_t
fill_dest(td_transport_t *tp, recv_op_t *r, const wire_hdr_t *w, int rndv,
          void *data)
{
    for (uint32_t i = 0; i < w->nb; i++) {
        r->dest[i].len = w->blen[i];  /* the handler may not change lengths */
        if (r->dest[i].buf == NULL) {
            r->dest[i].buf = malloc(w->blen[i] ? w->blen[i] : 1);
            r->dest[i].mem = TD_MEM_HOST;
            r->owned[i] = 1;
            if (r->dest[i].buf == NULL) {
                for (uint32_t j = 0; j < i; j++) {
                    if (r->owned[j]) {
                        free(r->dest[j].buf);
                        r->dest[j].buf = NULL;
                    }
                }
                r->n_bodies = 0;
                if (rndv) {
                    ucp_am_data_release(tp->worker, data);
                }
                recv_finish(r, TD_ERR_NO_MEMORY);
                return TD_ERR_NO_MEMORY;
            }
        } else if (r->dest[i].mem != TD_MEM_HOST &&
                   !(tp->mem_types & (1u << r->dest[i].mem))) {
            /* Staging of device buffers comes with the CUDA path. */
            if (rndv) {
                ucp_am_data_release(tp->worker, data);
            }
            recv_finish(r, td_error(TD_ERR_UNSUPPORTED, "transport: body "
                                    "into device memory not supported"));
            return TD_ERR_UNSUPPORTED;
        }
    }
    return TD_OK;
}

/* Step 4a: an eager message's bodies are in DATA already: copy them. */
static inline void
recv_eager(recv_op_t *r, const wire_hdr_t *w, const void *data)
{
    const uint8_t *p = data;

    for (uint32_t i = 0; i < w->nb; i++) {
        if (w->blen[i] > 0) {
            memcpy(r->dest[i].buf, p, w->blen[i]);
        }
        p += w->blen[i];
    }
    recv_finish(r, TD_OK);
}

/* Step 4b: rendezvous: UCX moves the bodies straight into the
 * destinations. */
static void
recv_rndv(td_transport_t *tp, recv_op_t *r, const wire_hdr_t *w, void *data)
{
    ucp_request_param_t prm;
    void *buf, *req;
    size_t count;
    uint32_t nb = w->nb;

    memset(&prm, 0, sizeof(prm));
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                       UCP_OP_ATTR_FIELD_USER_DATA |
                       UCP_OP_ATTR_FIELD_MEMORY_TYPE;
    prm.cb.recv_am = recv_data_cb;
    prm.user_data = r;
    prm.memory_type = ucs_mem(nb ? r->dest[0].mem : TD_MEM_HOST);
    if (nb == 1) {
        buf = r->dest[0].buf;
        count = w->blen[0];
    } else {
        for (uint32_t i = 0; i < nb; i++) {
            r->iov[i].buffer = r->dest[i].buf;
            r->iov[i].length = w->blen[i];
        }
        prm.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
        prm.datatype = ucp_dt_make_iov();
        buf = r->iov;
        count = nb;
    }
    req = ucp_am_recv_data_nbx(tp->worker, data, buf, count, &prm);
    if (req == NULL) {
        recv_finish(r, TD_OK);
    } else if (UCS_PTR_IS_ERR(req)) {
        recv_finish(r, status_from_ucs(UCS_PTR_STATUS(req)));
    } else {
        tp->peers[r->src].rx_inflight++;                        /* L14 */
    }
}

/* Step 4c: an offer (O2, O5): checked, delivered, its bodies read in
 * place from the sender, answered. */
static void
offer_recv(td_transport_t *tp, const uint8_t *h, wire_hdr_t *w,
           ucp_ep_h reply)
{
    const uint8_t *o = h + WIRE_FIXED + (size_t)w->nb * WIRE_BODY + w->ulen;
    td__cma_src_t who = { td_get_be32(o), td_get_be64(o + 8),
                          td_get_be64(o + 16) };
    uint64_t seq = td_get_be64(o + 24);
    int src = (int)w->src;
    peer_t *p = &tp->peers[src];
    _Alignas(16) uint8_t stack_op[RECV_OP_SIZE(TD_TRANSPORT_BODIES_MAX)];
    recv_op_t *r;
    ucp_ep_h ep;
    td_status_t st = TD_OK;

    /* L11: not in a receive callback: its address is asked for, and
     * this offer refused through the reply endpoint (the sender sends
     * it again through UCX and offers again later) */
    if (!peer_ready(tp, src)) {
        offer_answer(tp, src, seq, ANS_LATER, reply);
        return;
    }
    /* connected first: the answer goes there, and then its host is known
     * (a peer that cannot be reached is not read either) */
    if (peer_connect(tp, src, &ep) != TD_OK ||
        tp->inplace_min[w->id] == 0 ||
        (tp->mem_types & ~(1u << TD_MEM_HOST)) != 0 ||
        !peer_local(tp, src) ||
        (p->cma_pid != who.pid &&
         (who.token != cma_token_for(tp, who.pid) || !td__cma_check(&who)))) {
        BUMP(tp->n_refused);
        td_log_debug("transport: refused an offer of rank %d (pid %u)",
                     src, who.pid);
        offer_answer(tp, src, seq, ANS_REFUSED, reply);
        return;
    }
    p->cma_pid = who.pid;
    r = recv_op_init(stack_op, w->nb, 0);
    deliver(tp, h, w, r, NULL);
    if (r->done == NULL) {
        /* the handler dropped it: nothing to read */
        offer_answer(tp, src, seq, ANS_READ, NULL);
        recv_finish(r, TD_OK);
        return;
    }
    if (fill_dest(tp, r, w, 0, NULL) != TD_OK) {
        offer_answer(tp, src, seq, ANS_FAILED, NULL);   /* finished already */
        return;
    }
    for (uint32_t i = 0; st == TD_OK && i < w->nb; i++) {
        if (w->blen[i] > 0) {
            st = td__cma_read(who.pid,
                              td_get_be64(o + OFFER_FIXED + i * OFFER_BODY),
                              r->dest[i].buf, w->blen[i]);
        }
    }
    offer_answer(tp, src, seq, st == TD_OK ? ANS_READ : ANS_FAILED, NULL);
    if (st == TD_OK) {
        BUMP(tp->n_inplace);
    }
    recv_finish(r, st);
}

/* L12: a message from SRC, which this rank dropped, is not delivered; it
 * is answered "you were dropped" ('D' | be32 ms it was silent | be32
 * TODIST_LIVENESS in ms), at most TELL_MAX times, through the endpoint
 * kept for it, else the message's reply endpoint (as L9), unless it is
 * such an answer itself (both ranks dropped each other). */
#define TELL_MAX          4
#define TELL_LEN          9
#define TELL_MS_MAX       (2u * 86400u * 1000u)

static void
dropped_recv(td_transport_t *tp, int src, const wire_hdr_t *w,
             const uint8_t *header, const ucp_am_recv_param_t *param)
{
    peer_t *p = &tp->peers[src];
    uint8_t m[TELL_LEN];
    ucp_ep_h ep;

    BUMP(tp->dropped);
    if ((w->id == LIVE_ID && w->ulen >= 1 && header[WIRE_FIXED] == 'D') ||
        p->told >= TELL_MAX || tp->closing) {
        return;
    }
    ep = p->linger_ep != NULL ? p->linger_ep : reply_ep_of(param);
    if (ep == NULL) {
        return;
    }
    m[0] = 'D';
    td_put_be32(m + 1, p->drop_quiet_ms);
    td_put_be32(m + 5, (uint32_t)(tp->live_ns / 1000000));
    p->told++;
    td_log_debug("transport: rank %d, dropped, sent a message (handler %u):"
                 " told it was dropped", src, (unsigned)w->id);
    internal_send_on(tp, ep, src, LIVE_ID, m, sizeof(m));
}

/* L12: SRC says it dropped this rank (M: the TELL_LEN - 1 bytes after
 * 'D'): its fate is kept and it is failed after this round's UCX
 * progress (told_fail: not from inside the receive callback of a message
 * that came through the endpoint it closes), unless it failed already
 * (each dropped the other, or it died) or the answer is malformed. */
static void
told_dropped(td_transport_t *tp, int src, const uint8_t *m)
{
    peer_t *p = &tp->peers[src];
    uint32_t quiet = td_get_be32(m), live = td_get_be32(m + 4);

    if (p->failed || p->told_due || tp->closing || quiet > TELL_MS_MAX ||
        live == 0 || live > TELL_MS_MAX) {
        return;
    }
    snprintf(p->fate, sizeof(p->fate), "dropped this rank: it heard "
             "nothing from it for %.1f s (TODIST_LIVENESS=%g)",
             quiet * 1e-3, live * 1e-3);
    __atomic_store_n(&p->fated, 1, __ATOMIC_RELEASE);
    td_log_error("transport: rank %d %s", src, p->fate);
    p->told_due = 1;
    tp->told_pending = 1;
}

/* L12: the peers told_dropped heard from are failed (token holder,
 * outside UCX's callbacks). */
static void
told_fail(td_transport_t *tp)
{
    tp->told_pending = 0;
    for (int r = 0; r < tp->params.world_size; r++) {
        peer_t *p = &tp->peers[r];

        if (p->told_due) {
            p->told_due = 0;
            if (!tp->closing) {     /* close_endpoints has its endpoint */
                peer_fail(tp, r, p->ep, p->fate, FAIL_TOLD);
            }
        }
    }
}

/* UCX's active message callback (progress thread): parse, deliver to the
 * handler, place the bodies, then receive them eagerly, by rendezvous or
 * in place. */
static ucs_status_t
am_recv_cb(void *arg, const void *header, size_t header_length, void *data,
           size_t length, const ucp_am_recv_param_t *param)
{
    td_transport_t *tp = arg;
    int rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
    wire_hdr_t w;
    recv_op_t *r;
    _Alignas(16) uint8_t stack_op[RECV_OP_SIZE(TD_TRANSPORT_BODIES_MAX)];

    if (wire_parse(tp, header, header_length, length, &w) != 0) {
        goto drop;
    }
    if (!tag_ok(tp, header, &w)) {
        if (rndv) {
            ucp_am_data_release(tp->worker, data);
        }
        return UCS_OK;
    }
    if (tp->peers[w.src].dropped) {                             /* L12 */
        dropped_recv(tp, (int)w.src, &w, header, param);
        if (rndv) {
            ucp_am_data_release(tp->worker, data);
        }
        return UCS_OK;
    }
    if (td__mbox_active(&tp->mb)) {
        mbox_drain(tp, (int)w.src);     /* X3: what was written before it */
    }
    tp->peers[w.src].rx_count++;                                /* L2 */
    if (w.id == LIVE_ID) {                                      /* L3 */
        if (w.ulen == 1 && w.nb == 0 &&
            ((const uint8_t *)header)[WIRE_FIXED] == 'P') {
            live_answer(tp, (int)w.src, param);                 /* L9 */
        } else if (w.ulen == TELL_LEN && w.nb == 0 &&
                   ((const uint8_t *)header)[WIRE_FIXED] == 'D') {
            told_dropped(tp, (int)w.src,                        /* L12 */
                         (const uint8_t *)header + WIRE_FIXED + 1);
        } else if (w.ulen == 1 + TD__MBOX_OFFER_BYTES && w.nb == 0 &&
                   ((const uint8_t *)header)[WIRE_FIXED] == 'M') {
            /* X2: recorded only; mapped at the first send to it */
            td__mbox_offered(&tp->mb, (int)w.src,
                             (const uint8_t *)header + WIRE_FIXED + 1);
        }       /* 'W': a wake-up (X4), 'H': a wire-up probe (L13): no more */
        if (rndv) {
            ucp_am_data_release(tp->worker, data);
        }
        return UCS_OK;
    }
    if (w.id == CMA_ID) {                                       /* O4 */
        if (!w.offer && w.nb == 0) {
            offer_answered(tp, (int)w.src,
                           (const uint8_t *)header + WIRE_FIXED, w.ulen);
        }
        if (rndv) {
            ucp_am_data_release(tp->worker, data);
        }
        return UCS_OK;
    }
    if (__atomic_load_n(&tp->handlers[w.id].fn, __ATOMIC_ACQUIRE) == NULL) {
        /* Well formed but nobody listens: a peer's todist sent it and
         * counted it, so count it too, or the join would never settle. */
        BUMP(tp->n_received);
        if (w.offer) {                  /* its send completes (O3) */
            offer_answer(tp, (int)w.src, td_get_be64((const uint8_t *)header
                         + header_length - OFFER_LEN(w.nb) + 24), ANS_READ,
                         reply_ep_of(param));
        }
        goto drop;
    }
    if (w.offer) {
        if (rndv) {
            ucp_am_data_release(tp->worker, data);
        }
        offer_recv(tp, header, &w, reply_ep_of(param));
        return UCS_OK;
    }
    /* An eager message completes inside this call: keep its state on the
     * stack; only a rendezvous outlives it. */
    if (rndv) {
        void *mem = malloc(RECV_OP_SIZE(w.nb));

        BUMP(tp->rndv_received);
        if (mem == NULL) {
            goto drop;
        }
        r = recv_op_init(mem, w.nb, 1);
    } else {
        r = recv_op_init(stack_op, w.nb, 0);
    }
    if (deliver(tp, header, &w, r,
                !rndv && tp->peers[w.src].host == 2 ? data : NULL)) {
        return UCS_OK;                  /* S1: the handler took the bodies */
    }
    if (fill_dest(tp, r, &w, rndv, data) != TD_OK) {
        return UCS_OK;
    }
    if (rndv) {
        recv_rndv(tp, r, &w, data);
    } else {
        recv_eager(r, &w, data);
    }
    return UCS_OK;

drop:
    /* Malformed or unheard: count the drop and let the data go. (A
     * malformed message is not counted as received: no todist sender
     * counted it as sent.) */
    BUMP(tp->dropped);
    if (rndv) {
        ucp_am_data_release(tp->worker, data);
    }
    return UCS_OK;
}

/* ---- small messages through mailboxes (X1-X6) --------------------------- */

/* X2: offer our inbox to DST, a peer of this host (token holder). */
static void
mbox_offer(td_transport_t *tp, int dst)
{
    uint8_t m[1 + TD__MBOX_OFFER_BYTES];

    tp->peers[dst].mbox_offered = 1;
    m[0] = 'M';
    if (td__mbox_offer(&tp->mb, dst, m + 1) == TD__MBOX_OFFER_BYTES) {
        internal_send(tp, dst, LIVE_ID, m, sizeof(m), NULL);
    }
}

/* X1: OP (a peer of this host, a handler id that asked) written into its
 * mailbox in the peer's inbox, completed at once: 1; 0 when it does not
 * fit, device memory, the peer offered nothing usable or its ring is
 * full (then UCX carries it, X3 keeping the order). Token holder. */
static int
mbox_send(td_transport_t *tp, send_op_t *op)
{
    td__mbox_out_t *o;
    td__mbox_slot_t *s;
    uint8_t *p;
    uint32_t pos;
    int k;

    if (op->mem != TD_MEM_HOST ||
        op->wire_len + op->total > TD__MBOX_DATA ||
        (o = td__mbox_out_usable(&tp->mb, op->dst)) == NULL) {
        return 0;
    }
    td__mbox_ring_lock(o);
    td__mbox_reclaim_locked(o);
    if (!td__mbox_slot_reserve(o, &k)) {
        td__mbox_ring_unlock(o);
        return 0;
    }
    pos = td__mbox_slot_take(o, k, 0, 0);
    td__mbox_ring_unlock(o);
    /* B1: the fields, then the state (the receiver polls this line) */
    s = &o->mb->slot[k];
    s->pos = pos;
    s->w[0] = tp->peers[op->dst].am_tx;             /* X3 */
    s->w[1] = (uint32_t)op->wire_len;
    s->len = op->wire_len + op->total;
    memcpy(s->data, op->wire, op->wire_len);
    p = s->data + op->wire_len;
    for (size_t i = 0; i < op->n_bodies; i++) {
        if (op->iov[i].length > 0) {
            memcpy(p, op->iov[i].buffer, op->iov[i].length);
        }
        p += op->iov[i].length;
    }
    atomic_store_explicit(&s->state, TD__MBOX_FULL, memory_order_release);
    tp->n_mbox_tx++;
    if (td__mbox_receiver_sleeps(o)) {
        uint8_t wake = 'W';

        internal_send(tp, op->dst, LIVE_ID, &wake, 1, NULL); /* X4 */
    }
    op_defer(tp, op, TD_OK);        /* copied: the bodies may be reused */
    return 1;
}

/* X6: a message of SRC's mailbox, copied out (BUF: HLEN bytes of our
 * header, then DLEN of bodies), checked as one UCX brought would be,
 * its ring position taken (B2) and delivered as an eager one. 0 when it
 * was refused (no ring position taken: X6). */
static int
mbox_deliver(td_transport_t *tp, int src, const uint8_t *buf, size_t hlen,
             size_t dlen)
{
    _Alignas(16) uint8_t stack_op[RECV_OP_SIZE(TD_TRANSPORT_BODIES_MAX)];
    wire_hdr_t w;
    recv_op_t *r;

    if (wire_parse(tp, buf, hlen, dlen, &w) != 0 || w.src != (uint32_t)src ||
        w.offer || w.id >= CMA_ID) {
        BUMP(tp->dropped);
        return 0;
    }
    if (!tag_ok(tp, buf, &w)) {
        return 0;                       /* counted and logged */
    }
    td__mbox_in_advance(&tp->mb, src);
    if (__atomic_load_n(&tp->handlers[w.id].fn, __ATOMIC_ACQUIRE) == NULL) {
        BUMP(tp->n_received);           /* as am_recv_cb: the join */
        BUMP(tp->dropped);
        return 1;
    }
    BUMP(tp->n_mbox_rx);
    r = recv_op_init(stack_op, w.nb, 0);
    deliver(tp, buf, &w, r, NULL);      /* S1: peers of this host as before */
    if (fill_dest(tp, r, &w, 0, NULL) == TD_OK) {
        recv_eager(r, &w, buf + hlen);
    }
    return 1;
}

/* Deliver the messages waiting in SRC's mailbox, in ring order, that were
 * written after every active message SRC posted before them arrived (X3).
 * Token holder (B3: rd is the token holder's). Returns how many. */
static int
mbox_drain(td_transport_t *tp, int src)
{
    uint8_t buf[TD__MBOX_DATA];
    td__mbox_slot_t *s;
    int n = 0;

    if (!td__mbox_in_polled(&tp->mb, src) || tp->peers[src].mbox_dead) {
        return 0;                                               /* X5 */
    }
    while (td__mbox_next_full(&tp->mb, src, &s)) {
        /* B1: the fields copied once, then checked */
        uint32_t after = s->w[0], hlen = s->w[1];
        uint64_t len = s->len;
        int k = (int)(s->pos % TD__MBOX_SLOTS);

        if ((int32_t)(after - tp->peers[src].rx_count) > 0) {
            tp->ucx_due = 1;    /* X7: UCX brings it */
            break;              /* X3: an earlier active message is due */
        }
        if (len > TD__MBOX_DATA || hlen > len) {
            td__mbox_ack(&tp->mb, src, k, TD_ERR_PROTOCOL, 0, 0, NULL, 0, 0);
            BUMP(tp->dropped);
            continue;           /* X6: no position taken */
        }
        memcpy(buf, s->data, len);
        /* the slot goes back before the handler runs (it may send) */
        td__mbox_ack(&tp->mb, src, k, TD_OK, 0, 0, NULL, 0, 0);
        n += mbox_deliver(tp, src, buf, hlen, len - hlen);
    }
    return n;
}

/* X1: every mailbox of our inbox (token holder). */
static int
mbox_poll(td_transport_t *tp)
{
    int n_in = atomic_load_explicit(&tp->mb.n_in, memory_order_acquire);
    int n = 0;

    for (int i = 0; i < n_in; i++) {
        int src = tp->mb.in_list[i];
        td__mbox_slot_t *s;

        if (td__mbox_next_full(&tp->mb, src, &s)) {
            n += mbox_drain(tp, src);
        }
    }
    return n;
}

/* ---- the progress thread ------------------------------------------------ */

/* Token holder, outside UCX callbacks: a failed send's peer may be
 * asked about here (L10). */
static void
report_completions(td_transport_t *tp)
{
    while (tp->done_head != NULL) {
        send_op_t *op = tp->done_head;
        tp->done_head = op->next;
        if (op->status == TD_ERR_TRANSPORT &&
            (tp->peers[op->dst].failed || peer_gone_wait(tp, op->dst))) {
            op->status = TD_ERR_PEER;                        /* L10 */
            free(op->why);
            op->why = NULL;
        }
        op_finish(tp, op, op->status);
    }
}

static int
drain_queue(td_transport_t *tp)
{
    send_op_t *list = NULL;
    int n = 0;

    /* The shared queue first: a thread that queued a message while another
     * held the token and then, holding it itself, posted another locally
     * (an inline handler, say) sends them in that order. */
    if (__atomic_load_n(&tp->q_nonempty, __ATOMIC_ACQUIRE)) {
        pthread_mutex_lock(&tp->lock);
        list = tp->q_head;
        tp->q_head = tp->q_tail = NULL;
        __atomic_store_n(&tp->q_nonempty, 0, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&tp->lock);
    }
    while (list != NULL) {
        send_op_t *op = list;
        list = op->next;
        op_start(tp, op);
        n++;
    }
    /* Then what the holder posted (no lock needed). */
    while (tp->local_head != NULL) {
        send_op_t *op = tp->local_head;
        tp->local_head = op->next;
        if (tp->local_head == NULL) {
            tp->local_tail = NULL;
        }
        op_start(tp, op);
        n++;
    }
    return n;
}

/* Progress until every request in REQS[0..N) is done and no open endpoint
 * has a send in flight, or DEADLINE passes; done requests are freed and
 * set to NULL, ST[i] gets their status. */
/* UCX's progress (token holder): its callbacks run inside, which X8's
 * direct sends must know. */
static unsigned
ucx_progress(td_transport_t *tp)
{
    unsigned n;

    tp->in_ucx++;
    n = ucp_worker_progress(tp->worker);
    tp->in_ucx--;
    if (n > 0) {
        __atomic_store_n(&tp->ucx_events, tp->ucx_events + n,
                         __ATOMIC_RELAXED);
    }
    return n;
}

static void
wait_requests(td_transport_t *tp, void **reqs, ucs_status_t *st, int n,
              double deadline)
{
    int pending = 1;

    while (pending > 0) {
        ucx_progress(tp);
        report_completions(tp);
        pending = 0;
        for (int i = 0; i < n; i++) {
            if (reqs[i] == NULL) {
                continue;
            }
            ucs_status_t s = ucp_request_check_status(reqs[i]);
            if (s != UCS_INPROGRESS) {
                st[i] = s;
                ucp_request_free(reqs[i]);
                reqs[i] = NULL;
            } else {
                pending++;
            }
        }
        for (int i = 0; i < n; i++) {
            pending += tp->peers[i].ep != NULL && tp->peers[i].inflight > 0;
        }
        if (pending > 0 && td_now_s() > deadline) {
            return;
        }
    }
}

/* Sends still in UCX once every endpoint is closed: a force close fails
 * them, but UCX (1.13) completes them from its slow-path callback queue, on
 * a later ucp_worker_progress. Progress until each one's send_cb has run
 * (which frees the request), bounded by 2 s: a request left
 * behind is reported by ucp_worker_destroy ("was not returned to mpool
 * ucp_requests") and its op never completed. */
static void
drain_sends(td_transport_t *tp)
{
    /* the force close has failed them already: a few progress calls do */
    double deadline = td_now_s() + (tp->close_timeout < 2 ? tp->close_timeout
                                                           : 2);
    int left;

    do {
        ucx_progress(tp);
        report_completions(tp);
        left = 0;
        for (int i = 0; i < tp->params.world_size; i++) {
            left += tp->peers[i].inflight;
        }
    } while (left > 0 && td_now_s() < deadline);
    if (left > 0) {
        td_log_warn("transport: rank %d: %d send(s) still in UCX after the "
                    "endpoints were closed", tp->params.rank, left);
    }
}

/* TODIST_TEST_CLOSE_STALL=R:S, for tests only: world rank R stops S
 * seconds as its closes begin, before its flushes, with nothing
 * progressing its worker meanwhile: a rank that gets no CPU then (its
 * peers' flushes wait for it; tests/hosts/test_hosts.sh). */
static void
close_test_stall(const td_transport_t *tp)
{
    const char *s = getenv("TODIST_TEST_CLOSE_STALL");
    int r;
    double sec;

    if (s != NULL && sscanf(s, "%d:%lf", &r, &sec) == 2 &&
        r == tp->params.rank && sec > 0 && sec < 60) {
        struct timespec ts = { (time_t)sec,
                               (long)((sec - (double)(time_t)sec) * 1e9) };

        nanosleep(&ts, NULL);
    }
}

/* Close every endpoint. First flush them all, bounded by close_timeout; an
 * endpoint whose flush completes is closed in flush mode, one whose flush
 * does not (a stopped, hung or partitioned peer holds a transfer) is
 * closed in force mode, which fails its outstanding requests: closing it
 * in flush mode would never complete, and ucp_worker_destroy asserts on an
 * endpoint with requests still attached. Such ranks are counted in
 * tp->unclosed for td__transport_destroy to report. */
static void
close_endpoints(td_transport_t *tp)
{
    int n = tp->params.world_size;
    void **reqs = calloc(n, sizeof(*reqs));
    ucs_status_t *st = calloc(n, sizeof(*st));
    double deadline = td_now_s() + tp->close_timeout;
    ucp_request_param_t prm = { .op_attr_mask = 0 };

    tp->closing = 1;                                              /* E1 */
    for (int i = 0; i < n; i++) {
        linger_close(tp, i);                                      /* L12 */
    }
    close_test_stall(tp);
    if (reqs == NULL || st == NULL) {
        deadline = 0;   /* no memory to track requests: force every close */
    }
    for (int i = 0; deadline > 0 && i < n; i++) {
        if (tp->peers[i].ep != NULL && !tp->peers[i].failed &&
            !__atomic_load_n(&tp->peers[i].left, __ATOMIC_ACQUIRE)) {
            void *req = ucp_ep_flush_nbx(tp->peers[i].ep, &prm);
            if (UCS_PTR_IS_PTR(req)) {
                reqs[i] = req;
            } else {
                st[i] = UCS_PTR_STATUS(req);
            }
        }
    }
    if (deadline > 0) {
        wait_requests(tp, reqs, st, n, deadline);
    }
    for (int i = 0; i < n; i++) {
        ucp_request_param_t cp = { .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                   .flags = 0 };
        bool stuck = deadline <= 0 || (reqs != NULL && reqs[i] != NULL) ||
                     (tp->peers[i].ep != NULL && tp->peers[i].inflight > 0);
        if (reqs != NULL && reqs[i] != NULL) {
            ucp_request_free(reqs[i]);   /* released when force ends it */
            reqs[i] = NULL;
        }
        if (tp->peers[i].ep == NULL) {
            continue;
        }
        int left = __atomic_load_n(&tp->peers[i].left, __ATOMIC_ACQUIRE);
        if (stuck || tp->peers[i].failed || left || st[i] != UCS_OK) {
            cp.flags = UCP_EP_CLOSE_FLAG_FORCE;
        }
        if (stuck && !tp->peers[i].failed && !left && deadline > 0) {
            if (tp->unclosed == 0) {
                tp->unclosed_rank = i;
            }
            tp->unclosed++;
        }
        void *req = ucp_ep_close_nbx(tp->peers[i].ep, &cp);
        tp->peers[i].ep = NULL;
        if (UCS_PTR_IS_PTR(req)) {
            if (reqs != NULL) {
                reqs[i] = req;
            } else {
                ucp_request_free(req);
            }
        }
    }
    if (reqs != NULL && st != NULL) {
        wait_requests(tp, reqs, st, n, td_now_s() + tp->close_timeout);
        for (int i = 0; i < n; i++) {
            if (reqs[i] != NULL) {
                /* Released, so ucp_worker_destroy may purge it. */
                ucp_request_free(reqs[i]);
            }
        }
    }
    free(reqs);
    free(st);
    drain_sends(tp);
}

/* Endpoints asked for by td__transport_watch (token holder). */
static void
connect_watched(td_transport_t *tp)
{
    __atomic_store_n(&tp->watch_pending, 0, __ATOMIC_SEQ_CST);
    for (int r = 0; r < tp->params.world_size; r++) {
        td_status_t st;
        ucp_ep_h ep;

        if (!__atomic_exchange_n(&tp->peers[r].watch, 0, __ATOMIC_ACQ_REL) ||
            tp->peers[r].ep != NULL || tp->peers[r].failed) {
            continue;
        }
        if (!peer_ready(tp, r)) {                               /* L11 */
            tp->peers[r].watch_later = 1;   /* addr_arrived */
            continue;
        }
        st = peer_connect(tp, r, &ep);
        if (st != TD_OK && connect_failed(tp, r, st) == TD_ERR_TRANSPORT) {
            td_log_warn("transport: rank %d: cannot watch rank "
                    "%d: %s", tp->params.rank, r, td_last_error());
        }
    }
}

/* Peers asked for by td__transport_peer_revive (token holder): R1 and
 * R2 of transport.h. An endpoint still open (a rank taken out of the
 * members while its process ran) is closed by force, as a failure's is. */
static void
revive_peers(td_transport_t *tp)
{
    ucp_request_param_t prm = { .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                .flags = UCP_EP_CLOSE_FLAG_FORCE };

    __atomic_store_n(&tp->revive_pending, 0, __ATOMIC_SEQ_CST);
    for (int r = 0; r < tp->params.world_size; r++) {
        peer_t *p = &tp->peers[r];
        void *req;

        if (!__atomic_load_n(&p->revive, __ATOMIC_ACQUIRE)) {
            continue;
        }
        if (p->ep != NULL) {
            ucp_ep_h ep = p->ep;

            p->ep = NULL;
            p->dead_ep = ep;                             /* R2 */
            offers_fail(tp, r);                          /* O3 */
            req = ucp_ep_close_nbx(ep, &prm);
            if (UCS_PTR_IS_PTR(req)) {
                ucp_request_free(req);
            }
        }
        linger_close(tp, r);                /* L12: the old process's */
        if (p->parked > 0 && p->wiring) {
            /* L13: parked on the old endpoint's wire-up: they go to the
             * new process (its address first) */
            __atomic_store_n(&tp->addr_news, 1, __ATOMIC_SEQ_CST);
        }
        p->wiring = 0;
        p->dropped = 0;
        p->told = 0;
        p->told_due = 0;
        __atomic_store_n(&p->fated, 0, __ATOMIC_RELEASE);
        pthread_mutex_lock(&tp->res_lock);          /* L11: a new address */
        p->addr_gen++;
        if (p->addr_state == ADDR_WANTED) {
            tp->res_wanted--;
        }
        free(p->addr);
        free(p->addr_why);
        p->addr = NULL;
        p->addr_why = NULL;
        p->addr_state = ADDR_NONE;
        pthread_mutex_unlock(&tp->res_lock);
        p->mbox_dead = 1;                   /* X5: not a revived one either */
        td__mbox_peer_dead(&tp->mb, r);
        p->watch = 0;
        p->watch_later = 0;
        p->tried = 0;
        p->host = 0;
        p->refused = 0;
        p->cma_pid = 0;
        p->remote = 0;
        p->rx_seen = p->rx_count;
        p->heard_w = tp->live_watched_ns;
        p->ping_w = -1;
        p->busy_told = 0;
        if (tp->params.peer_reset != NULL) {
            tp->params.peer_reset(tp->params.peer_gone_arg, r);    /* R1 */
        }
        __atomic_store_n(&p->left, 0, __ATOMIC_RELEASE);
        __atomic_store_n(&p->failed, 0, __ATOMIC_RELEASE);
        __atomic_store_n(&p->revive, 0, __ATOMIC_RELEASE);      /* R2 */
    }
}

/* One round by the token holder: progress, report completions, start
 * what was posted. Returns the number of events. */
#define UCX_IDLE_ROUNDS 64      /* X7: then UCX every UCX_EVERY-th round */
#define UCX_EVERY       4

static unsigned
progress_once(td_transport_t *tp)
{
    unsigned n = 0;

    /* X7: while the mailboxes carry the traffic, UCX's poll (a third of
     * an idle round) is made every UCX_EVERY-th round */
    if (tp->ucx_due || tp->ucx_idle < UCX_IDLE_ROUNDS ||
        tp->ucx_idle % UCX_EVERY == 0 || !td__mbox_active(&tp->mb)) {
        tp->ucx_due = 0;
        n = ucx_progress(tp);
    }
    tp->ucx_idle = n > 0 ? 0 : tp->ucx_idle + 1;

    if (__atomic_load_n(&tp->addr_news, __ATOMIC_RELAXED)) {
        addr_arrived(tp);                                       /* L11 */
    }
    if (__atomic_load_n(&tp->watch_pending, __ATOMIC_RELAXED)) {
        connect_watched(tp);
    }
    if (__atomic_load_n(&tp->revive_pending, __ATOMIC_RELAXED)) {
        revive_peers(tp);
    }
    if (tp->told_pending) {
        told_fail(tp);                                          /* L12 */
    }
    {
        /* the clock every 256th round (relaxed: the progress thread sets
         * it without the token after a poll, below) */
        unsigned c = __atomic_load_n(&tp->gone_ctr, __ATOMIC_RELAXED) + 1;

        __atomic_store_n(&tp->gone_ctr, c, __ATOMIC_RELAXED);
        if ((c & 255) == 0) {
            peers_liveness(tp);
        }
    }

    if (td__mbox_active(&tp->mb)) {
        n += mbox_poll(tp);                                     /* X1 */
    }
    if (tp->done_head != NULL) {
        report_completions(tp);
    }
    if (tp->local_head != NULL ||
        __atomic_load_n(&tp->q_nonempty, __ATOMIC_RELAXED)) {
        n += drain_queue(tp);
    }
    if (tp->live_ns > 0 &&                                      /* L4 */
        ((++tp->live_rounds & 15) == 0 ||
         __atomic_load_n(&tp->live_due, __ATOMIC_RELAXED))) {
        live_tick(tp);
    }
    return n;
}

/* Before a token holder leaves in blocking mode: arm the worker so that the
 * progress thread, asleep on the event fd, wakes for the next event; when
 * events are pending, handle them first, and when they keep coming, wake it
 * outright. When the progress thread is not asleep on the event fd it
 * arms the worker itself before it goes there: nothing to do (and every
 * message to an armed worker costs its sender a signal and this process a
 * wake-up). */
static void
leave_armed(td_transport_t *tp)
{
    if (!__atomic_load_n(&tp->in_poll, __ATOMIC_SEQ_CST)) {
        return;
    }
    for (int i = 0; i < 4; i++) {
        if (ucp_worker_arm(tp->worker) == UCS_OK) {
            if (__atomic_load_n(&tp->q_nonempty, __ATOMIC_ACQUIRE) ||
                tp->local_head != NULL || tp->done_head != NULL) {
                break;
            }
            return;
        }
        tp->ucx_due = 1;            /* X7: the events arm saw, now */
        progress_once(tp);
    }
    worker_signal(tp);
}

/* While threads drive progress themselves, the progress thread sleeps in
 * short naps: a driver leaving with its reply wakes nobody (the next call
 * usually follows at once); one giving up on a long wait signals. N1:
 * the nap grows while short drives follow each other. */
#define NAP_US     100
#define NAP_MAX_US 1000

/* While jobs run elsewhere in the process and cores are scarce, the busy
 * progress thread sleeps at most this long between rounds. */
#define JOB_NAP_US 50

/* A driver waiting longer than this yields its core now and then; where
 * cores are scarce, one waiting longer than SLEEP_AFTER_S sleeps on the
 * event fd instead (a short call's reply takes about 2 us). */
#define YIELD_AFTER_S 5e-6
#define SLEEP_AFTER_S 10e-6
/* X10: a rank allowed one core, a driver that has waited this long sleeps
 * on the event fd in any mode, instead of yielding on. */
#define LONG_WAIT_S 1e-3
/* ... and one standing in for the progress thread (td__transport_drive_
 * polling) yields after this long without a message: where two pollers
 * share a core each message waits for a yield (measured at load 30-50:
 * never yielding, calls of 100 us and more: up to the whole drive; 5 us,
 * 14 us; 2 us, 11 us), while on cores of their own the next call of a
 * busy caller comes within a microsecond and it never yields. */
#define POLL_YIELD_AFTER_S 2e-6

/* Nap for US microseconds, or until signalled; returns the next nap's
 * length (N1: longer when more than one drive began meanwhile). */
static unsigned
nap(td_transport_t *tp, unsigned us)
{
    unsigned gen = __atomic_load_n(&tp->drive_gen, __ATOMIC_RELAXED);
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_nsec += us * 1000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&tp->drv_lock);
    if (!STOPPED(tp)) {
        pthread_cond_timedwait(&tp->drv_cond, &tp->drv_lock, &ts);
    }
    pthread_mutex_unlock(&tp->drv_lock);
    if (__atomic_load_n(&tp->drive_gen, __ATOMIC_RELAXED) - gen < 2) {
        return NAP_US;
    }
    return us < NAP_MAX_US / 2 ? 2 * us : NAP_MAX_US;
}

static void
nap_set(td_transport_t *tp, unsigned us)
{
    if (tp->nap_us != us) {
        __atomic_store_n(&tp->nap_us, us, __ATOMIC_RELAXED);
    }
}

unsigned
td__transport_nap_us(td_transport_t *tp)
{
    return __atomic_load_n(&tp->nap_us, __ATOMIC_RELAXED);
}

/* A driver that left less than this ago is likely to be back at once (a
 * caller between two calls): the progress thread naps on. */
#define RECENT_NS 50000

static int64_t
now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* After a round: work handed to other threads of this process (pool
 * jobs, counted by yield_ctr; a job asleep on a condition variable takes
 * itself out of the count, td__rpc_blocking) may need this core. Where
 * cores are scarce a yield is not enough (the scheduler may keep polling
 * here while the worker waits behind the other rank's poller): sleep until
 * the count changes, or JOB_NAP_US, so the core goes idle and the worker
 * is pulled onto it. */
/* Are jobs counted (yield_to_jobs would act)? */
static int
jobs_waiting(td_transport_t *tp)
{
    const int *ctr = __atomic_load_n(&tp->yield_ctr, __ATOMIC_ACQUIRE);

    return ctr != NULL && __atomic_load_n(ctr, __ATOMIC_RELAXED) > 0;
}

static int
yield_to_jobs(td_transport_t *tp)
{
    const int *ctr = __atomic_load_n(&tp->yield_ctr, __ATOMIC_ACQUIRE);
    int jobs;

    if (ctr == NULL || (jobs = __atomic_load_n(ctr, __ATOMIC_RELAXED)) <= 0) {
        return 0;
    }
    if (tp->scarce) {
        struct timespec ts = { 0, JOB_NAP_US * 1000L };

        __atomic_store_n(&tp->ctr_sleeping, 1, __ATOMIC_SEQ_CST);
        syscall(SYS_futex, ctr, FUTEX_WAIT_PRIVATE, jobs, &ts,
                NULL, 0);
        __atomic_store_n(&tp->ctr_sleeping, 0, __ATOMIC_RELAXED);
        return 1;
    }
    if (tp->mode == TD_PROGRESS_BUSY) {
        sched_yield();
    }
    return 0;
}

static void *
progress_main(void *arg)
{
    td_transport_t *tp = arg;
    double idle_since = td_now_s(), idle = 0;
    unsigned busy_spins = 0, idle_rounds = 0;
    unsigned left_seen = 0, gen_seen = 0;
    int64_t left_at = 0;        /* when a new leave was seen (0: none) */

    pthread_setname_np(pthread_self(), "td-progress");
    while (!STOPPED(tp)) {
        unsigned n;

        unsigned gen = __atomic_load_n(&tp->drive_gen, __ATOMIC_RELAXED);

        if (__atomic_load_n(&tp->n_drivers, __ATOMIC_RELAXED) > 0 ||
            gen != gen_seen) {
            /* a driver, or one begun since the last look (U8) */
            gen_seen = gen;
            nap_set(tp, nap(tp, tp->nap_us));
            idle_since = td_now_s();
            idle = 0;
            continue;
        }
        unsigned left = __atomic_load_n(&tp->drive_left, __ATOMIC_RELAXED);
        if (left != left_seen) {
            /* N3: a driver left since the last look; timed from here */
            left_seen = left;
            left_at = left & 1u ? 0 : now_ns();
        }
        if (left_at != 0) {
            /* the clock is read only after a driver left */
            if (now_ns() - left_at < RECENT_NS) {
                nap_set(tp, nap(tp, tp->nap_us));
                idle_since = td_now_s();
                idle = 0;
                continue;
            }
            left_at = 0;
        }
        if (!token_take(tp)) {
            /* A direct sender has it for a few hundred ns (a driver would
             * have been seen above). Never sleep on the token here: every
             * sender's release would then cost a wake-up. */
            if ((++busy_spins & 63) == 0) {
                sched_yield();      /* the holder may want this core */
            } else {
                td_cpu_relax();
            }
            continue;
        }
        nap_set(tp, NAP_US);                /* N1: no driver, a round */
        /* The hot loop of busy polling: only cheap checks besides UCX. */
        n = progress_once(tp);
        if (tp->mode == TD_PROGRESS_BUSY) {
            token_drop(tp);
            yield_to_jobs(tp);
            continue;
        }
        if (tp->scarce && jobs_waiting(tp)) {
            token_drop(tp);
            if (yield_to_jobs(tp)) {
                idle_since = td_now_s();   /* a reply may follow: stay awake */
                idle = 0;
                continue;
            }
            if (!token_take(tp)) {
                continue;
            }
        }
        if (n > 0) {
            idle_since = td_now_s();
            idle = 0;
            token_drop(tp);
            continue;
        }
        /* Blocking: spin a little after activity (a reply usually comes
         * within microseconds), then sleep on the event fd. Past
         * POLL_YIELD_AFTER_S of the spin, yield each turn: a caller that
         * shares this core (it sent the call answered here and waits for
         * the reply) runs only when this thread does; without the yield
         * it waited out the whole spin (round trip = spin + 10 us at load
         * 30-50, bench/RESULTS.md). */
        /* The clock every 8th idle round (a round is well under a
         * microsecond; the thresholds below are microseconds): a read
         * each round lengthened the poll that notices a call. */
        if ((++idle_rounds & 7) == 0) {
            idle = td_now_s() - idle_since;
        }

        if (idle < 20e-6 ||
            ucp_worker_arm(tp->worker) == UCS_ERR_BUSY ||
            __atomic_load_n(&tp->q_nonempty, __ATOMIC_ACQUIRE) ||
            STOPPED(tp)) {
            if (idle >= 20e-6) {
                tp->ucx_due = 1;    /* X7: arm may have seen events */
            }
            token_drop(tp);
            if (idle > POLL_YIELD_AFTER_S) {
                sched_yield();
            }
            continue;
        }
        /* X4: writers of our inbox are told, then it is looked at once
         * more; the first sleep is short (a write that missed the
         * announcement is seen by the next look). */
        int cookie = td__mbox_sleep_begin(&tp->mb);

        if (cookie != 0 && mbox_poll(tp) > 0) {
            td__mbox_sleep_end(&tp->mb, cookie);
            idle_since = td_now_s();
            idle = 0;
            token_drop(tp);
            continue;
        }
        /* Set before the drop: a thread taking the token from now on
         * knows to arm the worker when it leaves. */
        __atomic_store_n(&tp->in_poll, 1, __ATOMIC_SEQ_CST);
        token_drop(tp);
        struct pollfd pfd = { .fd = tp->efd, .events = POLLIN };
        if (cookie != 0) {
            struct timespec ts = { 0, MBOX_RECHECK_NS };

            if (ppoll(&pfd, 1, &ts, NULL) == 0 && token_take(tp)) {
                int n_mb = mbox_poll(tp);

                token_drop(tp);
                if (n_mb == 0) {
                    poll(&pfd, 1, BLOCK_POLL_MS);
                }
            }
        } else {
            poll(&pfd, 1, BLOCK_POLL_MS);
        }
        td__mbox_sleep_end(&tp->mb, cookie);
        __atomic_store_n(&tp->in_poll, 0, __ATOMIC_SEQ_CST);
        __atomic_store_n(&tp->live_due, 1, __ATOMIC_RELAXED);   /* L4 */
        idle_since = td_now_s();
        idle = 0;
        /* the next round looks (liveness) */
        __atomic_store_n(&tp->gone_ctr, 255, __ATOMIC_RELAXED);
    }

    if (__atomic_load_n(&tp->halted, __ATOMIC_ACQUIRE)) {
        return NULL;        /* Z1: the process exits; UCX left as it is */
    }
    /* Drivers see stop and leave; direct senders are brief. */
    while (!token_take(tp) && !token_wait(tp, 1000)) {
    }
    /* Shutdown: fail what is still queued, then close the endpoints. */
    pthread_mutex_lock(&tp->lock);
    send_op_t *list = tp->q_head;
    tp->q_head = tp->q_tail = NULL;
    pthread_mutex_unlock(&tp->lock);
    if (tp->local_tail != NULL) {
        tp->local_tail->next = list;
        list = tp->local_head;
        tp->local_head = tp->local_tail = NULL;
    }
    if (tp->parked_tail != NULL) {                              /* L11 */
        tp->parked_tail->next = list;
        list = tp->parked_head;
        tp->parked_head = tp->parked_tail = NULL;
    }
    while (list != NULL) {
        send_op_t *op = list;
        list = op->next;
        op_defer(tp, op, TD_ERR_CANCELED);
    }
    report_completions(tp);
    close_endpoints(tp);
    /* O3: offers still unanswered are cancelled (one UCX never completed
     * stays, as its other abandoned sends do: drain_sends warned) */
    for (send_op_t **pp = &tp->offers; *pp != NULL;) {
        send_op_t *op = *pp;

        if (!op->hdr_done) {
            pp = &op->next;
            continue;
        }
        *pp = op->next;
        op->offering = 0;
        op_defer(tp, op, TD_ERR_CANCELED);
    }
    report_completions(tp);
    return NULL;
}

/* ---- creation and teardown ---------------------------------------------- */

static int
online_cpus(void)
{
    cpu_set_t set;

    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
        return CPU_COUNT(&set);
    }
    return (int)sysconf(_SC_NPROCESSORS_ONLN);
}

/* TODIST_LIVENESS: seconds a peer on another host may stay silent (L3);
 * 0 turns the check off. */
static td_status_t
live_parse(td_transport_t *tp)
{
    const char *env = getenv("TODIST_LIVENESS");
    double s = LIVE_DEFAULT_S;
    char *end;

    if (env != NULL && env[0] != '\0') {
        s = strtod(env, &end);
        if (end == env || *end != '\0' || !(s >= 0) || s > 86400) {
            return td_error(TD_ERR_INVALID, "transport: TODIST_LIVENESS='%s' "
                            "is not a number of seconds in 0..86400 (0: "
                            "off)", env);
        }
    }
    tp->live_ns = (int64_t)(s * 1e9);
    return TD_OK;
}

static td_status_t
choose_mode(const td_transport_params_t *params, td_progress_mode_t *mode_p)
{
    const char *env = getenv("TODIST_PROGRESS");
    td_progress_mode_t mode = params->progress;

    if (env != NULL && env[0] != '\0') {
        if (strcmp(env, "busy") == 0) {
            mode = TD_PROGRESS_BUSY;
        } else if (strcmp(env, "blocking") == 0) {
            mode = TD_PROGRESS_BLOCKING;
        } else if (strcmp(env, "auto") == 0) {
            mode = TD_PROGRESS_AUTO;
        } else {
            return td_error(TD_ERR_INVALID, "transport: TODIST_PROGRESS=%s is "
                            "not auto, busy or blocking", env);
        }
    }
    if (mode == TD_PROGRESS_AUTO) {
        /* Busy polling only pays when each local rank has a core for its
         * progress thread and one for its own work. */
        int local = params->local_world_size > 0 ? params->local_world_size : 1;
        mode = params->world_size > 1 && 2 * local <= online_cpus()
               ? TD_PROGRESS_BUSY : TD_PROGRESS_BLOCKING;
    }
    *mode_p = mode;
    return TD_OK;
}

/* Does UCX_TLS (TLS, NULL: unset) leave UCX a shared-memory (mm)
 * transport? Not when it excludes "mm", "sm" or "shm" (UCX's aliases;
 * or posix and sysv) with '^', or lists transports without any of them
 * (UCX_TLS=sm,self left todist's MM_ERROR_HANDLING unset, so UCX found
 * no transport with peer-failure handling and no rank could reach
 * another: every first collective timed out): then todist's MM_
 * defaults would only make UCX warn "invalid configurations" in every
 * rank (the docs advise UCX_TLS=^mm for in-place recovery, elastic.md). */
static int
ucx_tls_has_mm(const char *tls)
{
    static const char *const mm[] = { "all", "mm", "shm", "posix", "sysv",
                                      "xpmem", "sm" };
    int neg, seen[7] = { 0 };
    char buf[256], *save = NULL;

    if (tls == NULL || tls[0] == '\0') {
        return 1;
    }
    neg = tls[0] == '^';
    snprintf(buf, sizeof(buf), "%s", tls + neg);
    for (char *t = strtok_r(buf, ",", &save); t != NULL;
         t = strtok_r(NULL, ",", &save)) {
        t += strspn(t, " \\");        /* '\\name': UCX's exact name */
        for (size_t i = 0; i < sizeof(mm) / sizeof(mm[0]); i++) {
            seen[i] |= strcmp(t, mm[i]) == 0;
        }
    }
    if (neg) {
        return !(seen[1] || seen[2] || seen[6] || (seen[3] && seen[4]));
    }
    for (size_t i = 0; i < sizeof(mm) / sizeof(mm[0]); i++) {
        if (seen[i]) {
            return 1;
        }
    }
    return 0;
}

static td_status_t
make_context(td_transport_t *tp)
{
    ucp_config_t *config;
    ucp_params_t params;
    ucp_context_attr_t attr;
    ucs_status_t s;
    char name[64];
    int has_mm = ucx_tls_has_mm(getenv("UCX_TLS"));

    s = ucp_config_read(NULL, NULL, &config);
    if (s != UCS_OK) {
        return td_error(TD_ERR_TRANSPORT, "transport: cannot read the UCX "
                        "configuration: %s", ucs_status_string(s));
    }
    for (size_t i = 0; i < sizeof(ucx_defaults) / sizeof(ucx_defaults[0]);
         i++) {
        const char *mm = strncmp(ucx_defaults[i].name, "MM_", 3) == 0
                         ? ucx_defaults[i].name + 3 : NULL;
        char posix[64], sysv[64];

        snprintf(name, sizeof(name), "UCX_%s", ucx_defaults[i].name);
        snprintf(posix, sizeof(posix), "UCX_POSIX_%s", mm ? mm : "");
        snprintf(sysv, sizeof(sysv), "UCX_SYSV_%s", mm ? mm : "");
        /* the user's setting wins, also one for a single mm transport;
         * none for mm transports UCX_TLS leaves out */
        if (getenv(name) == NULL && (mm == NULL || has_mm) &&
            (mm == NULL || (getenv(posix) == NULL && getenv(sysv) == NULL))) {
            ucp_config_modify(config, ucx_defaults[i].name,
                              ucx_defaults[i].value);
        }
    }
    memset(&params, 0, sizeof(params));
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME |
                        UCP_PARAM_FIELD_MT_WORKERS_SHARED;
    params.features = UCP_FEATURE_AM | UCP_FEATURE_TAG |
                      (tp->wakeup ? UCP_FEATURE_WAKEUP : 0);      /* N2 */
    params.name = "todist";
    params.mt_workers_shared = 0;
    s = ucp_init(&params, config, &tp->ctx);
    ucp_config_release(config);
    if (s != UCS_OK) {
        return td_error(TD_ERR_TRANSPORT, "transport: ucp_init failed: %s",
                        ucs_status_string(s));
    }
    attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
    if (ucp_context_query(tp->ctx, &attr) == UCS_OK) {
        tp->mem_types = 1u << TD_MEM_HOST;
        if (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) {
            tp->mem_types |= 1u << TD_MEM_CUDA;
        }
    }
    return TD_OK;
}

static td_status_t
make_worker(td_transport_t *tp)
{
    ucp_worker_params_t wp;
    ucp_worker_attr_t wa;
    ucp_am_handler_param_t hp;
    ucs_status_t s;

    memset(&wp, 0, sizeof(wp));
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    /* Only the token holder calls into the worker; ucp_worker_signal is
     * safe from any thread in every mode. */
    wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
    s = ucp_worker_create(tp->ctx, &wp, &tp->worker);
    if (s != UCS_OK) {
        return td_error(TD_ERR_TRANSPORT, "transport: cannot create the UCX "
                        "worker: %s", ucs_status_string(s));
    }
    wa.field_mask = UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER;
    if (ucp_worker_query(tp->worker, &wa) == UCS_OK &&
        wa.max_am_header < WIRE_MAX) {
        return td_error(TD_ERR_TRANSPORT, "transport: UCX allows AM headers "
                        "of %zu bytes, todist needs %d", wa.max_am_header,
                        WIRE_MAX);
    }
    s = ucp_worker_get_address(tp->worker, &tp->addr, &tp->addr_len);
    if (s != UCS_OK) {
        return td_error(TD_ERR_TRANSPORT, "transport: no worker address: %s",
                        ucs_status_string(s));
    }
    s = tp->wakeup ? ucp_worker_get_efd(tp->worker, &tp->efd) : UCS_OK;
    if (s != UCS_OK) {
        return td_error(TD_ERR_TRANSPORT, "transport: no worker event fd: %s",
                        ucs_status_string(s));
    }
    memset(&hp, 0, sizeof(hp));
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                    UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG |
                    UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
    hp.id = TD_AM_ID;
    hp.cb = am_recv_cb;
    hp.arg = tp;
    hp.flags = UCP_AM_FLAG_WHOLE_MSG;
    s = ucp_worker_set_am_recv_handler(tp->worker, &hp);
    if (s != UCS_OK) {
        return td_error(TD_ERR_TRANSPORT, "transport: cannot register the AM "
                        "handler: %s", ucs_status_string(s));
    }
    return TD_OK;
}

/* U5: the messages whose receives were cancelled, taken out, so that
 * ucp_worker_destroy does not warn of them (bounded: one a failed call). */
static void
pair_drain(td_transport_t *tp)
{
    ucp_request_param_t prm = { .op_attr_mask = 0 };
    ucp_tag_recv_info_t info;
    ucp_tag_message_h m;
    char buf[512];          /* (a longer one is cut, and taken out) */

    for (int i = 0; i < 1024; i++) {
        void *req;

        m = ucp_tag_probe_nb(tp->worker, 0, 0, 1, &info);
        if (m == NULL) {
            break;
        }
        req = ucp_tag_msg_recv_nbx(tp->worker, buf, sizeof(buf), m, &prm);
        if (req != NULL && !UCS_PTR_IS_ERR(req)) {
            while (ucp_request_check_status(req) == UCS_INPROGRESS) {
                ucp_worker_progress(tp->worker);
            }
            ucp_request_free(req);
        }
    }
}

static void
teardown(td_transport_t *tp)
{
    if (tp->addr != NULL) {
        ucp_worker_release_address(tp->worker, tp->addr);
    }
    if (tp->worker != NULL) {
        pair_drain(tp);
        ucp_worker_destroy(tp->worker);
    }
    if (tp->ctx != NULL) {
        ucp_cleanup(tp->ctx);
    }
    pthread_mutex_destroy(&tp->lock);
    for (int r = 0; tp->peers != NULL && r < tp->params.world_size; r++) {
        free(tp->peers[r].addr);
        free(tp->peers[r].addr_why);
    }
    pthread_cond_destroy(&tp->res_cond);
    pthread_mutex_destroy(&tp->res_lock);
    td__mbox_release(&tp->mb);          /* the progress thread is gone */
    td__fault_destroy(&tp->faults);
    pthread_cond_destroy(&tp->drv_cond);
    pthread_mutex_destroy(&tp->drv_lock);
    free(atomic_exchange(&tp->op_spare, NULL));
    free(tp->peers);
    free(tp->tag_to);
    free(tp->tag_from);
    free(ep_args);
    ep_args = NULL;
    free(tp);
}

static void
job_tag(const char *token, int src, int dst, uint8_t *tag)
{
    static const char label[] = "todist-am-v2";
    uint8_t msg[sizeof(label) - 1 + 8], mac[EVP_MAX_MD_SIZE];
    unsigned int mlen = 0;

    memcpy(msg, label, sizeof(label) - 1);
    td_put_be32(msg + sizeof(label) - 1, (uint32_t)src);
    td_put_be32(msg + sizeof(label) + 3, (uint32_t)dst);
    HMAC(EVP_sha256(), token, (int)strlen(token), msg, sizeof(msg), mac,
         &mlen);
    memcpy(tag, mac, TAG_LEN);
}

/* Every peer's tags, both ways (2 x world HMACs, once). */
static td_status_t
make_tags(td_transport_t *tp)
{
    int n = tp->params.world_size, me = tp->params.rank;
    const char *token = tp->params.token != NULL ? tp->params.token : "";

    tp->tag_to = malloc((size_t)n * TAG_LEN);
    tp->tag_from = malloc((size_t)n * TAG_LEN);
    if (tp->tag_to == NULL || tp->tag_from == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "transport: out of memory for the "
                        "job tags of %d peers", n);
    }
    for (int r = 0; r < n; r++) {
        job_tag(token, me, r, tp->tag_to + (size_t)r * TAG_LEN);
        job_tag(token, r, me, tp->tag_from + (size_t)r * TAG_LEN);
    }
    {
        /* O2: the key of the pids' tokens, and ours */
        static const char label[] = "todist-cma-v1";
        uint8_t mac[EVP_MAX_MD_SIZE];
        unsigned int mlen = 0;

        HMAC(EVP_sha256(), token, (int)strlen(token), (const uint8_t *)label,
             sizeof(label) - 1, mac, &mlen);
        memcpy(tp->cma_key, mac, sizeof(tp->cma_key));
        tp->cma_token = cma_token_for(tp, (uint32_t)getpid());
    }
    tp->params.token = NULL;   /* not kept: the tags and key are enough */
    return TD_OK;
}

td_status_t
td__transport_create(const td_transport_params_t *params,
                    td_transport_t **tp_p)
{
    td_transport_t *tp;
    td_status_t status;
    int rc;

    if (params == NULL || params->world_size < 1 || params->rank < 0 ||
        params->rank >= params->world_size) {
        return td_error(TD_ERR_INVALID, "transport: rank %d of world size %d "
                        "is not valid", params ? params->rank : -1,
                        params ? params->world_size : 0);
    }
    if (ep_args != NULL) {
        return td_error(TD_ERR_STATE, "transport: one transport per process");
    }
    tp = calloc(1, sizeof(*tp));
    if (tp == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "transport: out of memory");
    }
    tp->params = *params;
    tp->efd = -1;
    tp->close_timeout = 2.0;
    pthread_mutex_init(&tp->lock, NULL);
    pthread_mutex_init(&tp->res_lock, NULL);
    pthread_cond_init(&tp->res_cond, NULL);
    td__fault_init(&tp->faults);
    pthread_mutex_init(&tp->drv_lock, NULL);
    {
        pthread_condattr_t ca;

        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&tp->drv_cond, &ca);
        pthread_condattr_destroy(&ca);
    }
    tp->peers = calloc(params->world_size, sizeof(*tp->peers));
    ep_args = calloc(2 * (size_t)params->world_size, sizeof(*ep_args));
    if (tp->peers == NULL || ep_args == NULL) {
        status = td_error(TD_ERR_NO_MEMORY, "transport: out of memory for "
                          "%d peers", params->world_size);
        goto err;
    }
    for (int i = 0; i < params->world_size; i++) {
        ep_args[2 * i] = tp;
        ep_args[2 * i + 1] = (void *)(intptr_t)i;
    }
    status = make_tags(tp);
    if (status != TD_OK) {
        goto err;
    }
    const char *fault = getenv("TODIST_FAULT");
    if (fault != NULL && fault[0] != '\0') {
        status = td__fault_parse(&tp->faults, fault, params->rank);
        if (status != TD_OK) {
            goto err;
        }
    }
    status = choose_mode(params, &tp->mode);
    if (status != TD_OK) {
        goto err;
    }
    status = live_parse(tp);
    if (status != TD_OK) {
        goto err;
    }
    tp->scarce = 2 * (params->local_world_size > 0 ? params->local_world_size
                                                   : 1) > online_cpus();
    tp->one_core = online_cpus() == 1;                          /* X10 */
    tp->wakeup = tp->mode != TD_PROGRESS_BUSY || tp->scarce ||
                 tp->one_core;                                  /* N2 */
    td_log_debug("transport: rank %d progress %s (%d local ranks, %d cores "
                 "allowed)", params->rank, tp->mode == TD_PROGRESS_BUSY
                 ? "busy" : "blocking", params->local_world_size,
                 online_cpus());
    tp->eager_max = getenv("UCX_RNDV_THRESH") != NULL ? 0 : EAGER_MAX;
    tp->eager_far = getenv("UCX_RNDV_THRESH") != NULL ? 0 : EAGER_REMOTE_MAX;
    status = make_context(tp);
    if (status != TD_OK) {
        goto err;
    }
    status = make_worker(tp);
    if (status != TD_OK) {
        goto err;
    }
    tp->nap_us = NAP_US;                                        /* N1 */
    rc = pthread_create(&tp->thread, NULL, progress_main, tp);
    if (rc != 0) {
        status = td_error(TD_ERR_IO, "transport: cannot start the progress "
                          "thread: %s", strerror(rc));
        goto err;
    }
    tp->thread_started = 1;
    pthread_once(&exit_once, exit_register);                    /* Z1 */
    pthread_mutex_lock(&exit_lock);
    exit_tp = tp;
    exit_pid = getpid();
    pthread_mutex_unlock(&exit_lock);
    *tp_p = tp;
    return TD_OK;

err:
    teardown(tp);
    return status;
}

td_status_t
td__transport_destroy(td_transport_t *tp, double timeout)
{
    td_status_t status = TD_OK;

    if (tp == NULL) {
        return TD_OK;
    }
    pthread_mutex_lock(&exit_lock);
    int halted = tp->halted;

    if (exit_tp == tp && !halted) {
        exit_tp = NULL;
    }
    pthread_mutex_unlock(&exit_lock);
    if (halted) {
        return TD_OK;       /* Z1: the process is exiting */
    }
    if (tp->thread_started) {
        if (timeout > 0) {
            tp->close_timeout = timeout;
        }
        thread_stop(tp);
    }
    /* L11: after the progress thread (its holders ask for addresses);
     * a fetch under way ends within the resolver's own timeout */
    pthread_mutex_lock(&tp->res_lock);
    tp->res_stop = 1;
    pthread_cond_broadcast(&tp->res_cond);
    pthread_mutex_unlock(&tp->res_lock);
    if (tp->res_started > 0) {
        pthread_join(tp->res_thread, NULL);
    }
    td__fault_report(&tp->faults);
    if (tp->unclosed > 0) {
        status = td_error(TD_ERR_TIMEOUT, "transport: rank %d%s did not "
                          "close %s endpoint within %.3g s (stopped, hung or "
                          "unreachable)", tp->unclosed_rank,
                          tp->unclosed > 1 ? " and others" : "",
                          tp->unclosed > 1 ? "their" : "its",
                          tp->close_timeout);
    }
    teardown(tp);
    return status;
}

td_status_t
td__transport_set_handler(td_transport_t *tp, uint16_t id,
                         td_transport_recv_fn fn, void *arg)
{
    if (id >= CMA_ID) {
        return td_error(TD_ERR_INVALID, "transport: handler id %u is not "
                        "below %d (%d and %d are the transport's own)", id,
                        CMA_ID, CMA_ID, LIVE_ID);
    }
    tp->handlers[id].arg = arg;
    __atomic_store_n(&tp->handlers[id].fn, fn, __ATOMIC_RELEASE);
    return TD_OK;
}

td_status_t
td__transport_set_inplace(td_transport_t *tp, uint16_t id, size_t min_bytes)
{
    if (id >= CMA_ID) {
        return td_error(TD_ERR_INVALID, "transport: handler id %u is not "
                        "below %d", id, CMA_ID);
    }
    tp->inplace_min[id] = min_bytes;
    return TD_OK;
}

td_status_t
td__transport_set_mbox(td_transport_t *tp, uint16_t id)
{
    char boot[64] = "";
    FILE *f;
    td_status_t st;

    if (id >= CMA_ID) {
        return td_error(TD_ERR_INVALID, "transport: handler id %u is not "
                        "below %d", id, CMA_ID);
    }
    /* B5: offers are taken from this boot only */
    if ((f = fopen("/proc/sys/kernel/random/boot_id", "r")) != NULL) {
        if (fgets(boot, sizeof(boot), f) == NULL) {
            boot[0] = '\0';
        }
        boot[strcspn(boot, "\n")] = '\0';
        fclose(f);
    }
    /* X9: a peer's offer may already be in flight, and the token holder
     * records it into tp->mb (am_recv_cb): set up holding the token */
    if (tl_holder == tp) {
        return td_error(TD_ERR_STATE, "transport: mailboxes are set up "
                        "from td_init, not from a callback");
    }
    while (!token_take(tp) && !token_wait(tp, 1000)) {
    }
    if (!tp->mb.on) {
        st = td__mbox_setup(&tp->mb, "transport", "message", 1,
                            tp->params.rank, tp->params.world_size, boot);
        if (st != TD_OK || !td__mbox_inbox_ensure(&tp->mb)) {
            token_drop(tp);
            return st;          /* no inbox (logged): UCX carries all */
        }
    }
    tp->mbox_on[id] = 1;
    token_drop(tp);
    return TD_OK;
}

void
td__transport_mbox_counts(td_transport_t *tp, uint64_t *sent_p,
                         uint64_t *received_p)
{
    *sent_p = __atomic_load_n(&tp->n_mbox_tx, __ATOMIC_RELAXED);
    *received_p = __atomic_load_n(&tp->n_mbox_rx, __ATOMIC_RELAXED);
}

void
td__transport_inplace_counts(td_transport_t *tp, uint64_t *read_p,
                            uint64_t *refused_p)
{
    *read_p = __atomic_load_n(&tp->n_inplace, __ATOMIC_RELAXED);
    *refused_p = __atomic_load_n(&tp->n_refused, __ATOMIC_RELAXED);
}

uint64_t
td__transport_taken_count(td_transport_t *tp)
{
    return __atomic_load_n(&tp->n_taken, __ATOMIC_RELAXED);
}

uint64_t
td__transport_lean_count(td_transport_t *tp)
{
    return __atomic_load_n(&tp->n_lean, __ATOMIC_RELAXED);
}

td_status_t
td__transport_address(td_transport_t *tp, const void **addr_p, size_t *len_p)
{
    *addr_p = tp->addr;
    *len_p = tp->addr_len;
    return TD_OK;
}

/* The op of a send (any thread): our header and the user header copied
 * into it, the bodies named. NULL: out of memory. */
static send_op_t *
op_build(td_transport_t *tp, int dst, uint16_t id, const void *header,
         size_t header_len, const td_iov_t *bodies, size_t n_bodies,
         td_transport_send_fn cb, void *arg)
{
    send_op_t *op;
    uint8_t *w;
    size_t wire_len = WIRE_FIXED + n_bodies * WIRE_BODY + header_len;

    /* room for an offer (O1) after the wire bytes */
    op = op_new(tp, sizeof(*op) + n_bodies * sizeof(ucp_dt_iov_t) +
                wire_len + (n_bodies > 0 ? OFFER_LEN(n_bodies) : 0));
    if (op == NULL) {
        return NULL;
    }
    op->wire = (uint8_t *)(op->iov + n_bodies);
    op->next = NULL;
    op->tp = tp;
    op->dst = dst;
    op->cb = cb;
    op->arg = arg;
    op->n_bodies = n_bodies;
    op->wire_len = wire_len;
    op->mem = n_bodies ? bodies[0].mem : TD_MEM_HOST;
    op->why = NULL;
    op->faulted = 0;
    op->id = id;
    op->no_offer = 0;
    op->offering = 0;
    op->total = 0;
    w = op->wire;
    wire_fill(tp, w, dst, id, header_len, n_bodies);
    for (size_t i = 0; i < n_bodies; i++) {
        wire_body(w + WIRE_FIXED + i * WIRE_BODY, bodies[i].len,
                  bodies[i].mem);
        op->iov[i].buffer = bodies[i].buf;
        op->iov[i].length = bodies[i].len;
        op->total += bodies[i].len;
    }
    if (header_len > 0) {
        memcpy(w + WIRE_FIXED + n_bodies * WIRE_BODY, header, header_len);
    }
    return op;
}

/* S2: send HEADER and one host BODY to DST at once if it qualifies (token
 * holder, not inside UCX; the caller checked the sizes and TODIST_FAULT).
 * 1: sent and complete, CB called; 0: nothing was sent. */
static int
lean_send(td_transport_t *tp, int dst, uint16_t id, const void *header,
          size_t header_len, const td_iov_t *body, td_transport_send_fn cb,
          void *arg)
{
    peer_t *p = &tp->peers[dst];
    _Alignas(16) uint8_t w[WIRE_FIXED + WIRE_BODY + LEAN_MAX];
    ucp_request_param_t prm;    /* only the fields in op_attr_mask are read */
    void *req;

    if (p->host != 2 || p->ep == NULL || p->failed || p->wiring ||
        __atomic_load_n(&tp->q_nonempty, __ATOMIC_ACQUIRE) ||
        tp->local_head != NULL) {
        return 0;
    }
    wire_fill(tp, w, dst, id, header_len, 1);
    wire_body(w + WIRE_FIXED, body->len, TD_MEM_HOST);
    memcpy(w + WIRE_FIXED + WIRE_BODY, header, header_len);
    prm.op_attr_mask = UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL;
    req = ucp_am_send_nbx(p->ep, TD_AM_ID, w, WIRE_FIXED + WIRE_BODY +
                          header_len, body->buf, body->len, &prm);
    if (UCS_PTR_IS_ERR(req)) {
        return 0;           /* no room now, or the peer failed: op_start */
    }
    if (req != NULL) {
        /* FORCE_IMM_CMPL promises none; should a UCX return one, its
         * bytes are this stack's: finish it here (we hold the token). */
        while (ucp_request_check_status(req) == UCS_INPROGRESS) {
            ucx_progress(tp);
        }
        ucp_request_free(req);
    }
    p->am_tx++;                                                 /* X3 */
    BUMP(tp->posted_local);
    BUMP(tp->n_lean);
    BUMP(tp->n_sent);
    if (cb != NULL) {
        cb(arg, TD_OK);
    }
    BUMP(tp->completed);
    return 1;
}

/* The end of a send by a thread that took the token: what completed is
 * reported, what callbacks posted is started, the token goes back. */
static void
direct_finish(td_transport_t *tp)
{
    while (tp->done_head != NULL || tp->local_head != NULL) {
        report_completions(tp);
        drain_queue(tp);
    }
    if (tp->mode != TD_PROGRESS_BUSY && !tl_will_drive) {
        /* The progress thread may sleep on the event fd: arm it. Not
         * needed when this sender drives next (it arms as it leaves). */
        leave_armed(tp);
    }
    token_drop(tp);
}

/* ---- a tagged exchange with one peer (U1..U7) ----------------------------- */

static td_status_t drive_held(td_transport_t *tp, int (*done)(void *arg),
                              void *arg, double max_s, int polls, double t0,
                              int counted);

/* Set BIT in X's DONE (U3: the token holder is its only writer). */
static void
pair_mark(td_transport_pair_t *x, int bit)
{
    __atomic_store_n(&x->done, __atomic_load_n(&x->done, __ATOMIC_RELAXED) |
                     bit, __ATOMIC_RELEASE);
}

/* The token, waited for (U2); 0 when the transport stops. */
static int
token_get(td_transport_t *tp)
{
    for (unsigned i = 0; !token_take(tp); i++) {
        if (STOPPED(tp)) {
            return 0;
        }
        if (i < 64) {
            td_cpu_relax();
        } else if (token_wait(tp, 20)) {
            break;
        }
    }
    return 1;
}

static td_status_t
pair_status(ucs_status_t s)
{
    return s == UCS_OK ? TD_OK
         : s == UCS_ERR_CANCELED ? TD_ERR_CANCELED
         : s == UCS_ERR_MESSAGE_TRUNCATED ? TD_ERR_PROTOCOL : TD_ERR_PEER;
}

static void
pair_recv_cb(void *req, ucs_status_t s, const ucp_tag_recv_info_t *info,
             void *arg)
{
    td_transport_pair_t *x = arg;
    void (*notify)(void) = x->notify;

    x->rstatus = pair_status(s);
    x->rlen = s == UCS_OK ? info->length : 0;
    x->rreq = NULL;
    ucp_request_free(req);
    /* the last touch of X (U3): its owner may return once it sees this */
    pair_mark(x, TD_PAIR_RECV);
    notify();
}

static void
pair_send_cb(void *req, ucs_status_t s, void *arg)
{
    td_transport_pair_t *x = arg;
    peer_t *p = &x->tp->peers[x->dst];
    void (*notify)(void) = x->notify;

    p->inflight--;
    /* cut by a forced close (L12, E1): the peer failed, not a cancel */
    x->sstatus = s != UCS_OK && p->failed ? TD_ERR_PEER : pair_status(s);
    ucp_request_free(req);
    pair_mark(x, TD_PAIR_SEND);                                 /* U3 */
    notify();
}

td_status_t
td__transport_pair_post(td_transport_t *tp, int dst, uint64_t tag,
                        const void *sbuf, size_t slen, void *rbuf,
                        size_t rcap, td_transport_pair_t *x,
                        int (*done)(void *arg), void *arg, double spin_s)
{
    peer_t *p = &tp->peers[dst];
    ucp_request_param_t prm;
    void *req;
    int spin, counted = 0;

    if (dst < 0 || dst >= tp->params.world_size || dst == tp->params.rank) {
        return td_error(TD_ERR_INVALID, "transport: a tagged exchange with "
                        "rank %d (world of %d, this rank %d)", dst,
                        tp->params.world_size, tp->params.rank);
    }
    /* U7: a driver from before the post (not from a callback: drive) */
    spin = done != NULL && spin_s > 0 && tl_holder != tp &&
           tp->thread_started;
    if (spin) {
        drive_begun(tp);                                        /* U8 */
    }
    if (!token_take(tp)) {
        if (spin) {
            drive_count(tp);       /* U8: counted while the token is taken */
            counted = 1;
        }
        if (!token_get(tp)) {
            if (counted) {
                drive_uncount(tp);
            }
            return td_error(TD_ERR_CANCELED, "transport: shut down");
        }
    }
    if (p->failed || p->ep == NULL || p->wiring == 1) {
        int failed = p->failed;

        if (counted) {
            drive_uncount(tp);
        }
        token_drop(tp);
        if (failed) {
            return failed_error(tp, dst);
        }
        td__transport_watch(tp, dst);                           /* U2 */
        return TD_ERR_NOT_FOUND;
    }
    x->tp = tp;
    x->dst = dst;
    x->done = 0;
    x->rstatus = x->sstatus = TD_OK;
    x->rlen = 0;
    /* U9: the send first, the receive while the message is out */
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                       UCP_OP_ATTR_FIELD_USER_DATA;
    prm.cb.send = pair_send_cb;
    prm.user_data = x;
    req = ucp_tag_send_nbx(p->ep, sbuf, slen,
                           tag ^ td_get_be64(tp->tag_to +
                                             (size_t)dst * TAG_LEN), &prm);
    if (UCS_PTR_IS_ERR(req)) {
        x->sstatus = pair_status(UCS_PTR_STATUS(req));
        pair_mark(x, TD_PAIR_SEND);
    } else if (req == NULL) {
        pair_mark(x, TD_PAIR_SEND);
    } else {
        p->inflight++;                                          /* U4 */
    }
    /* Always through the callback (NO_IMM_CMPL: UCX 1.13 reports no
     * length for a receive done at once); it may run inside the call. */
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                       UCP_OP_ATTR_FIELD_USER_DATA |
                       UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    prm.cb.recv = pair_recv_cb;
    prm.user_data = x;
    x->rreq = NULL;
    req = ucp_tag_recv_nbx(tp->worker, rbuf, rcap,                /* U6 */
                           tag ^ td_get_be64(tp->tag_from +
                                             (size_t)dst * TAG_LEN),
                           ~(ucp_tag_t)0, &prm);
    if (UCS_PTR_IS_ERR(req)) {
        x->rstatus = pair_status(UCS_PTR_STATUS(req));
        pair_mark(x, TD_PAIR_RECV);
    } else if (!(__atomic_load_n(&x->done, __ATOMIC_RELAXED) &
                 TD_PAIR_RECV)) {
        x->rreq = req;                        /* U4: still UCX's */
    }
    if (spin) {
        (void)drive_held(tp, done, arg, spin_s, 0, 0, counted);  /* U7 */
    } else {
        token_drop(tp);      /* (the caller drives next: it arms as it
                              * leaves, drive) */
    }
    return TD_OK;
}

void
td__transport_pair_cancel(td_transport_t *tp, td_transport_pair_t *x)
{
    if (__atomic_load_n(&x->done, __ATOMIC_ACQUIRE) & TD_PAIR_RECV) {
        return;
    }
    if (!token_get(tp)) {
        return;     /* stopped: the worker's destruction completes it */
    }
    if (!(__atomic_load_n(&x->done, __ATOMIC_ACQUIRE) & TD_PAIR_RECV) &&
        x->rreq != NULL) {
        ucp_request_cancel(tp->worker, x->rreq);                /* U4 */
    }
    token_drop(tp);
}

td_status_t
td__transport_send(td_transport_t *tp, int dst, uint16_t id,
                  const void *header, size_t header_len,
                  const td_iov_t *bodies, size_t n_bodies,
                  td_transport_send_fn cb, void *arg)
{
    send_op_t *op;

    if (dst < 0 || dst >= tp->params.world_size) {
        return td_error(TD_ERR_INVALID, "transport: rank %d is not in the "
                        "world of %d", dst, tp->params.world_size);
    }
    if (header_len > TD_TRANSPORT_HEADER_MAX ||
        n_bodies > TD_TRANSPORT_BODIES_MAX ||
        id >= TD_TRANSPORT_HANDLERS_MAX) {
        return td_error(TD_ERR_INVALID, "transport: message to rank %d: "
                        "header %zu bytes (max %d), %zu bodies (max %d), "
                        "handler %u (max %d)", dst, header_len,
                        TD_TRANSPORT_HEADER_MAX, n_bodies,
                        TD_TRANSPORT_BODIES_MAX, id,
                        TD_TRANSPORT_HANDLERS_MAX - 1);
    }
    for (size_t i = 0; i < n_bodies; i++) {
        if (bodies[i].len > 0 && bodies[i].buf == NULL) {
            return td_error(TD_ERR_INVALID, "transport: message to rank %d: "
                            "body %zu has no buffer", dst, i);
        }
        if (bodies[i].mem != bodies[0].mem ||
            !(tp->mem_types & (1u << bodies[i].mem))) {
            /* Device bodies are staged by the CUDA path (not yet here). */
            return td_error(TD_ERR_UNSUPPORTED, "transport: message to rank "
                            "%d: body %zu in memory type %d is not supported",
                            dst, i, (int)bodies[i].mem);
        }
    }
    if (__atomic_load_n(&tp->peers[dst].failed, __ATOMIC_RELAXED)) {
        return failed_error(tp, dst);
    }

    if (tl_holder != tp && token_take(tp)) {
        /* Nobody in the worker: send from this thread, after whatever was
         * queued before (order per sender is kept), and report what
         * completed at once. */
        if (STOPPED(tp)) {
            token_drop(tp);
            return td_error(TD_ERR_STATE, "transport: shutting down");
        }
        if (n_bodies == 1 && bodies[0].mem == TD_MEM_HOST &&
            header_len + bodies[0].len <= LEAN_MAX && tp->faults.n == 0 &&
            lean_send(tp, dst, id, header, header_len, bodies, cb, arg)) {
            direct_finish(tp);                                  /* S2 */
            return TD_OK;
        }
        op = op_build(tp, dst, id, header, header_len, bodies, n_bodies, cb,
                      arg);
        if (op == NULL) {
            token_drop(tp);
            return td_error(TD_ERR_NO_MEMORY, "transport: out of memory");
        }
        BUMP(tp->posted_local);
        drain_queue(tp);
        op_start(tp, op);
        direct_finish(tp);
        return TD_OK;
    }
    op = op_build(tp, dst, id, header, header_len, bodies, n_bodies, cb, arg);
    if (op == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "transport: out of memory");
    }
    if (STOPPED(tp)) {
        op_free(tp, op);
        return td_error(TD_ERR_STATE, "transport: shutting down");
    }
    if (tl_holder == tp) {
        BUMP(tp->posted_local);
        if (!tp->in_ucx && tp->mbox_on[id]) {
            /* X8: a handler run from our mailbox (an inline call's
             * reply, say): sent now, after what the holder queued. */
            drain_queue(tp);
            op_start(tp, op);
            return TD_OK;
        }
        /* From a callback or a handler run by the holder: started right
         * after the current progress call (never inside a UCX callback: a
         * new endpoint may need a store lookup), without a lock. */
        op_append(&tp->local_head, &tp->local_tail, op);
        return TD_OK;
    }
    pthread_mutex_lock(&tp->lock);
    if (STOPPED(tp)) {  /* checked again: the thread drains under this lock */
        pthread_mutex_unlock(&tp->lock);
        op_free(tp, op);
        return td_error(TD_ERR_STATE, "transport: shutting down");
    }
    BUMP(tp->posted_remote);
    op_append(&tp->q_head, &tp->q_tail, op);
    __atomic_store_n(&tp->q_nonempty, 1, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&tp->lock);
    /* A busy-polling thread notices the queue by itself; only a sleeping
     * one (or a driver asleep on the event fd) needs the wake-up. */
    if (tp->mode != TD_PROGRESS_BUSY ||
        __atomic_load_n(&tp->sleeping, __ATOMIC_SEQ_CST)) {
        worker_signal(tp);
    }
    return TD_OK;
}

/* A driver (holding the token) sleeps on the event fd until an event, a
 * queued send or td__transport_wake; at most 1 ms, then DONE is looked at
 * again (a future may also be completed by a thread outside the worker
 * that did not call td__transport_wake). */
static void
driver_sleep(td_transport_t *tp, int (*done)(void *arg), void *arg)
{
    int cookie;

    if (!tp->wakeup) {
        sched_yield();                  /* N2: no fd to sleep on */
        return;
    }
    if (ucp_worker_arm(tp->worker) != UCS_OK) {
        tp->ucx_due = 1;                /* X7 */
        return;                         /* events pending: go on polling */
    }
    __atomic_store_n(&tp->sleeping, 1, __ATOMIC_SEQ_CST);
    cookie = td__mbox_sleep_begin(&tp->mb);                     /* X4 */
    /* Checked after announcing the sleep: a sender queuing now sees the
     * flag and signals (both sides sequentially consistent). */
    if ((cookie == 0 || mbox_poll(tp) == 0) &&
        !__atomic_load_n(&tp->q_nonempty, __ATOMIC_SEQ_CST) &&
        tp->local_head == NULL && tp->done_head == NULL && !done(arg) &&
        !STOPPED(tp)) {
        struct pollfd pfd = { .fd = tp->efd, .events = POLLIN };

        poll(&pfd, 1, 1);
    }
    td__mbox_sleep_end(&tp->mb, cookie);
    __atomic_store_n(&tp->sleeping, 0, __ATOMIC_SEQ_CST);
}

void
td__transport_yield_when(td_transport_t *tp, const int *counter)
{
    __atomic_store_n(&tp->yield_ctr, counter, __ATOMIC_RELEASE);
}

void
td__transport_yield_done(td_transport_t *tp)
{
    const int *ctr = __atomic_load_n(&tp->yield_ctr, __ATOMIC_ACQUIRE);

    if (ctr != NULL && __atomic_load_n(&tp->ctr_sleeping, __ATOMIC_SEQ_CST)) {
        syscall(SYS_futex, ctr, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    }
}

static td_status_t drive(td_transport_t *tp, int (*done)(void *arg),
                         void *arg, double max_s, int polls);

td_status_t
td__transport_drive(td_transport_t *tp, int (*done)(void *arg), void *arg,
                   double max_s)
{
    return drive(tp, done, arg, max_s, 0);
}

td_status_t
td__transport_drive_polling(td_transport_t *tp, int (*done)(void *arg),
                           void *arg, double max_s)
{
    return drive(tp, done, arg, max_s, 1);
}

/* A drive's rounds, the token held: until DONE(ARG), MAX_S seconds after
 * T0 (td_now_s; 0: from the first look at the clock, after 32 rounds, U7)
 * or the stop; then it leaves (arms, says so, is uncounted) and drops the
 * token. COUNTED: the driver is counted (drive_count) already; else it
 * is at that first look (U8). */
static td_status_t
drive_held(td_transport_t *tp, int (*done)(void *arg), void *arg,
           double max_s, int polls, double t0, int counted)
{
    unsigned rounds = 0;
    int ok;

    while (!(ok = done(arg))) {
        progress_once(tp);
        if (__atomic_load_n(&tp->stop, __ATOMIC_RELAXED)) {
            break;
        }
        if ((++rounds & 31) == 0) {
            double now = td_now_s(), waited;

            if (!counted) {
                drive_count(tp);                                /* U8 */
                counted = 1;
            }
            if (t0 == 0) {
                t0 = now;
            }
            waited = now - t0;

            if (max_s >= 0 && waited > max_s) {
                break;
            }
            if (polls) {
                /* Standing in for the progress thread: never asleep on
                 * the event fd (a wake-up from there costs the next call
                 * several microseconds), but it gives its core away soon
                 * (POLL_YIELD_AFTER_S): where it shares one with the
                 * caller's wait, the caller runs only when it yields. */
                if (waited > POLL_YIELD_AFTER_S) {
                    sched_yield();
                }
                continue;
            }
            if ((tp->scarce && tp->mode == TD_PROGRESS_BUSY &&
                 waited > SLEEP_AFTER_S) ||
                (tp->one_core && waited > LONG_WAIT_S)) {
                /* Not a quick reply, and cores are scarce: the handler's
                 * thread (a pool thread of a local peer, say) may need
                 * this one; on one core, a rank of another session
                 * (X10). Sleep until an event arrives. */
                driver_sleep(tp, done, arg);
            } else if (waited > YIELD_AFTER_S) {
                sched_yield();
            }
        }
    }
    if (tp->mode != TD_PROGRESS_BUSY) {
        leave_armed(tp);    /* the progress thread may sleep on the efd */
    }
    /* Everything touching TP before the drop: once the token is free, the
     * transport may be torn down (shutdown takes the token last). */
    /* Done: probably back soon, the progress thread naps on. Giving up:
     * going to sleep, the progress thread takes over now. */
    {
        /* N3: counted, not timed (a clock read is ~25 ns of every call) */
        unsigned left = __atomic_load_n(&tp->drive_left, __ATOMIC_RELAXED) + 2;

        __atomic_store_n(&tp->drive_left, ok ? left & ~1u : left | 1u,
                         __ATOMIC_RELAXED);
    }
    if (counted) {
        drive_uncount(tp);
    }
    if (!ok) {
        pthread_mutex_lock(&tp->drv_lock);
        pthread_cond_signal(&tp->drv_cond);
        pthread_mutex_unlock(&tp->drv_lock);
    }
    token_drop(tp);
    return ok ? TD_OK : TD_ERR_TIMEOUT;
}

/* POLLS: the driver stands in for the progress thread: it never sleeps on
 * the event fd, and yields after POLL_YIELD_AFTER_S without a message. */
static td_status_t
drive(td_transport_t *tp, int (*done)(void *arg), void *arg, double max_s,
      int polls)
{
    double t0 = td_now_s();
    int got = 0;

    if (tl_holder == tp ||     /* from a callback: would recurse */
        !tp->thread_started || __atomic_load_n(&tp->stop, __ATOMIC_ACQUIRE)) {
        return TD_ERR_STATE;
    }
    drive_count(tp);
    /* The progress thread gives the token up after its current round;
     * another driver keeps it for its whole wait: then do not queue up. */
    for (unsigned i = 0; !(got = token_take(tp)); i++) {
        if (done(arg) || STOPPED(tp) ||
            (max_s >= 0 && td_now_s() - t0 > max_s)) {
            break;
        }
        if (i < 64) {
            td_cpu_relax();
        } else if (token_wait(tp, 20)) {
            /* Slept until the holder (maybe preempted on this core) let
             * go; re-check DONE every 20 us meanwhile. */
            got = 1;
            break;
        }
    }
    if (!got) {
        drive_uncount(tp);
        if (done(arg)) {
            return TD_OK;
        }
        return TD_ERR_STATE;        /* another thread drives progress */
    }
    return drive_held(tp, done, arg, max_s, polls, t0, 1);
}

bool
td__transport_drive_wanted(td_transport_t *tp)
{
    /* the caller counts itself among the drivers */
    return __atomic_load_n(&tp->n_drivers, __ATOMIC_RELAXED) > 1;
}

void
td__transport_will_drive(int on)
{
    tl_will_drive = on;
}

void
td__transport_watch(td_transport_t *tp, int rank)
{
    if (rank < 0 || rank >= tp->params.world_size ||
        rank == tp->params.rank) {
        return;
    }
    __atomic_store_n(&tp->peers[rank].watch, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&tp->watch_pending, 1, __ATOMIC_SEQ_CST);
    if (tp->mode != TD_PROGRESS_BUSY ||
        __atomic_load_n(&tp->sleeping, __ATOMIC_SEQ_CST)) {
        worker_signal(tp);
    }
}

void
td__transport_wake(td_transport_t *tp)
{
    if (__atomic_load_n(&tp->sleeping, __ATOMIC_SEQ_CST)) {
        worker_signal(tp);
    }
}

td_status_t
td__transport_flush(td_transport_t *tp, double timeout)
{
    double deadline = td_now_s() + timeout;
    uint64_t target;

    if (tl_holder == tp) {
        return td_error(TD_ERR_STATE, "transport: flush from the thread in "
                        "the worker (a callback) would deadlock");
    }
    pthread_mutex_lock(&tp->lock);
    target = __atomic_load_n(&tp->posted_remote, __ATOMIC_ACQUIRE) +
             __atomic_load_n(&tp->posted_local, __ATOMIC_ACQUIRE);
    pthread_mutex_unlock(&tp->lock);
    /* Not a hot path: poll the completion count. */
    for (;;) {
        uint64_t done = __atomic_load_n(&tp->completed, __ATOMIC_ACQUIRE);
        if (done >= target) {
            return TD_OK;
        }
        if (td_now_s() > deadline) {
            return td_error(TD_ERR_TIMEOUT, "transport: %" PRIu64 " sends "
                            "still in flight after %.3g s", target - done,
                            timeout);
        }
        struct timespec ts = { 0, 200000 };
        nanosleep(&ts, NULL);
    }
}

void
td__transport_counts(td_transport_t *tp, uint64_t *sent_p,
                    uint64_t *received_p)
{
    *sent_p = __atomic_load_n(&tp->n_sent, __ATOMIC_ACQUIRE);
    *received_p = __atomic_load_n(&tp->n_received, __ATOMIC_ACQUIRE);
}

size_t
td__transport_dropped(td_transport_t *tp)
{
    return __atomic_load_n(&tp->dropped, __ATOMIC_RELAXED);
}

uint64_t
td__transport_ucx_events(td_transport_t *tp)
{
    return __atomic_load_n(&tp->ucx_events, __ATOMIC_RELAXED);
}

size_t
td__transport_rndv_received(td_transport_t *tp)
{
    return __atomic_load_n(&tp->rndv_received, __ATOMIC_RELAXED);
}

size_t
td__transport_rejected(td_transport_t *tp)
{
    return __atomic_load_n(&tp->rejected, __ATOMIC_RELAXED);
}

void
td__transport_peer_left(td_transport_t *tp, int rank)
{
    if (tp != NULL && rank >= 0 && rank < tp->params.world_size) {
        __atomic_store_n(&tp->peers[rank].left, 1, __ATOMIC_RELEASE);
    }
}

static int
revived(void *arg)
{
    peer_t *p = arg;

    return !__atomic_load_n(&p->revive, __ATOMIC_ACQUIRE);
}

td_status_t
td__transport_peer_revive(td_transport_t *tp, int rank, double timeout)
{
    peer_t *p;
    double t0 = td_now_s();

    if (tp == NULL || rank < 0 || rank >= tp->params.world_size ||
        rank == tp->params.rank) {
        return td_error(TD_ERR_INVALID, "transport: revive rank %d (world "
                        "%d, this rank %d)", rank,
                        tp != NULL ? tp->params.world_size : 0,
                        tp != NULL ? tp->params.rank : -1);
    }
    p = &tp->peers[rank];
    __atomic_store_n(&p->revive, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&tp->revive_pending, 1, __ATOMIC_SEQ_CST);
    td__transport_wake(tp);
    while (!revived(p)) {
        double left = timeout - (td_now_s() - t0);

        if (left <= 0) {
            return td_error(TD_ERR_TIMEOUT, "transport: rank %d: the reset "
                            "of its endpoint (a new process took it) did "
                            "not run within %.3g s", rank, timeout);
        }
        /* drive the rounds ourselves, or let the progress thread */
        if (td__transport_drive(tp, revived, p, left < 0.01 ? left : 0.01) ==
            TD_ERR_STATE) {
            struct timespec ts = { 0, 200000 };

            td__transport_wake(tp);
            nanosleep(&ts, NULL);
        }
    }
    return TD_OK;
}

bool
td__transport_peer_alive(td_transport_t *tp, int dst)
{
    return dst >= 0 && dst < tp->params.world_size &&
           !__atomic_load_n(&tp->peers[dst].failed, __ATOMIC_RELAXED);
}

double
td__transport_fail_grace_s(td_transport_t *tp, int rank)
{
    /* (host: written by the token holder at connect; a stale read only
     * picks the longer grace) */
    if (tp == NULL || rank < 0 || rank >= tp->params.world_size ||
        __atomic_load_n(&tp->peers[rank].host, __ATOMIC_RELAXED) == 1) {
        /* L10 waited up to 1 s; an exiting ASan rank's teardown on a
         * loaded machine can take longer still */
        return 2.0;
    }
    return 1.5e-9 * (double)tp->live_ns + 0.5;
}

bool
td__transport_peer_fate(td_transport_t *tp, int rank, char *buf, size_t len)
{
    const char *fate;

    if (tp == NULL || rank < 0 || rank >= tp->params.world_size || len == 0 ||
        (fate = peer_fate(tp, rank)) == NULL) {
        return false;
    }
    snprintf(buf, len, "%s", fate);
    return true;
}

td_progress_mode_t
td__transport_progress_mode(td_transport_t *tp)
{
    return tp->mode;
}

int
td__transport_has_efd(td_transport_t *tp)
{
    int fd = -1, has;

    if (!token_get(tp)) {
        return -1;
    }
    has = ucp_worker_get_efd(tp->worker, &fd) == UCS_OK && fd >= 0;
    token_drop(tp);
    return has;
}

bool
td__transport_on_progress_thread(td_transport_t *tp)
{
    return tl_holder == tp;
}

unsigned
td__transport_mem_types(td_transport_t *tp)
{
    return tp->mem_types;
}
