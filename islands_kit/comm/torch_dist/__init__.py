"""``TorchDistTransport``: the ``Transport`` interface on torch.distributed (gloo on CPU, NCCL on GPU), launched by torchrun.
The class is in ``transport.py`` (the wire frames in ``frames.py``, the point-to-point mailbox in ``mailbox.py``);
the rank layout and launch glue live in ``islands_kit/comm/distributed.py``, the control-message format in
``comm/control.py``.

The sync strategies run unchanged: each process holds one island (``local_islands == [my island]``) and calls the same
``all_reduce`` / ``all_gather`` / ``send_recv`` / ``all_reduce_tensor`` as in the simulator. The result of an
all-reduce is *defined* as decode-each-payload then ``weighted_mean`` in island-id order, so this transport gives
bit-identical results to ``LocalTransport`` (tested end to end: the whole result.json — final_val_bpb, ledger,
simulated clock — equal to the last bit, wall_time_s aside).

Not supported here in lock-step mode: absent (preempted) islands — every island takes part in every operation, so
``faults.preempt_island`` is rejected by ``distributed.make_transport`` unless ``sync.mode=decoupled`` (below). Checkpoints are one file per rank (see
``islands_kit/train/checkpoint.py``); ``state_dict`` / ``load_state_dict`` below carry this transport's part.

Ranks. Two launch shapes, chosen by ``WORLD_SIZE`` (``islands_kit.comm.layout.RankLayout.for_world``, passed in):

* one process per island (``WORLD_SIZE == len(islands)``): an island's ``dp_ranks`` are folded into its micro-batches
  (run one after another in that process, exactly as the simulator does) — bit-identical to the simulator;
* one process per data-parallel rank (``WORLD_SIZE == sum(islands[*].dp_ranks)``): island ``i`` owns the contiguous
  global ranks ``[sum(dp_ranks[:i]), sum(dp_ranks[:i+1]))``; its first rank is the island's *leader*. Ranks of one
  island share ``island_group`` (gradients summed over it in ``Island.forward_backward``, Shampoo blocks owned across
  it). Bit-identical to the simulator when an island has 2 ranks of one micro-batch each, as in the two_site presets
  (a + b is commutative, so gloo's sum equals the simulator's accumulation; tested, with Shampoo); with more ranks or
  micro-batches per rank the sum is associated differently, and results agree to float rounding only.

  Example: two_site demo has dp_ranks (2, 1): ranks 0, 1 = island 0 (leader 0), rank 2 = island 1 (leader 2).

Groups. ``cross_group`` = the island leaders (the wide-area link); ``island_group`` = the ranks of my island (None for
an island of one process); ``_meta_group`` = all ranks on gloo (ledger/clock merging, barrier), even under NCCL.

Wire. A message is one uint8 tensor: a 40-byte header (``_META``: op sequence number, source and destination island,
CRC-32 of the channel name, the sender's simulated time, the all-reduce weight) followed by ``codecs.encode_bytes``
(24-byte header with codec, numel, block size and CRC-32, then ``payload.data``). all_reduce = ``all_gather`` of the
messages among leaders (async, completed on first ``Handle.wait``; all_gather is the same message flow, returning
every island's decoded payload instead of their mean); send_recv = ``batch_isend_irecv`` to the target's leader and
from the source's; non-leader ranks receive what their leader received by a ``broadcast`` inside ``island_group``. Every island's
payload must have the same byte length in one call (same codec, same fragment: true for every strategy here), because
gloo's all_gather needs equal sizes (gloo aborts the process on a frame of another size): the leaders exchange their
frame lengths first and a mismatch raises ``DistributedError`` naming the island before any frame is received. The
header lets the receiver check that both sides are in the same operation (a desynchronised protocol raises
``DistributedError`` instead of decoding garbage). Every field a peer sent is read through ``comm/peer.py`` (send
time, weight, the payload against this rank's own codec, numel and block size, its codes and top-k indices) before it
is used; a refusal stops every rank with one line naming the island, its rank and the field.

Ledger. Each process records the messages it *receives* (its leader's inbound links): ``(channel, src, me, nbytes,
start, end)``, priced by the cost model stated in ``comm/transport.py`` exactly like ``LocalTransport``: for an
all_reduce only the ring transfer from its predecessor (``ring_bytes`` of that payload; the wire here really carries
every payload to every leader, which the ring accounting deliberately does not price: it is what a ring implementation
would send), for an all_gather each other island's payload, for a send_recv its source's. Senders separately count
the payload bytes they hand to torch.distributed (``sent_bytes``), priced the same way; ``world_view()`` checks the two
agree. The full ledger is assembled by the collective ``world_view()`` (every rank must call it at the same point;
run.py does around evaluation records and the final result).

Simulated clock. The sender's simulated time travels in the header; the receiver computes the arrival with its own
``LinkModel`` for the (src -> me) direction. ``LinkModel`` keeps each direction's wire, connections and random stream
separate (draws seeded by ``(seed, src, dst, k)``, k = the transfer's index in that direction), so the receiver, which
sees every transfer on its inbound directions in posting order, reproduces the simulator's times exactly. To keep that
order, operations complete first-in first-out (waiting on a handle first completes every earlier one). A handle's
``arrival`` holds this island's key from the start (strategies test participation with ``island in handle.arrival``);
its value is final once the first ``wait``/``wait_result`` has completed the operation.

Failures. Every wait is bounded: a dead peer closes its sockets and the survivor's pending operation fails at once; a
peer that stops answering trips the process-group timeout (``ISLANDS_KIT_DIST_TIMEOUT_S``, default 300 s). Either way
the run ends with a ``DistributedError`` that names the rank, island, channel and operation. (Fault injection for the
tests lives in a test-only subclass, ``tests/faulty_transport.py``.)

Decoupled mode (``sync.mode=decoupled``, ``decoupled=True``; one process per island only). After the rendezvous no
collective, so that a dead island cannot hang anybody: islands and the synchroniser (rank 0, with island 0) exchange
point-to-point messages (``post`` / ``receive``, each pair (island 0, island j) on its own gloo group: gloo closes
every connection of a group whose wait timed out): a control message (``comm/control.py``, checked against the
receiver's schema) and optionally one payload (``codecs.encode_bytes``), sent as a fixed header (int64: sequence
number, CRC-32 of the kind, both lengths) then the body, on tags numbered per (sender, receiver) pair, so a message
can only be read by the receive it was meant for. Every ``receive`` is bounded (``timeout_s``); a peer that died
(closed sockets: at once), stayed silent past the bound or sent a message the wire refuses (``comm/peer.py``: out of
sequence, malformed, off-schema, a payload that is not what this rank expects) is *lost*: ``lost_islands()`` names it, nothing is sent to
or awaited from it again, and the caller goes on without it (or, with ``required=True``, the run ends with a
``DistributedError``). Posting never blocks; a send is completed before the next ``receive`` from the same peer (the
protocol answers only what it has read; gloo completes a send once its receive is posted, so the wait is bounded like
that receive) or at ``finish_messages``. The clock covers every island (the loop mirrors the others' clocks from the
config: in decoupled mode an island's clock does not depend on the wire), and ``world_view`` is local: the
synchroniser prices every transfer of the star itself (``send``: the link model and the ledger, as
``LocalTransport``), so its ledger is the whole world's.

Control messages. Everything that is not a payload (checkpoint steps and errors at resume, the ledger and clocks
merged by ``world_view``) goes through ``gather_control``: versioned, length-limited JSON checked against a schema on
receipt (``comm/control.py``), never a pickle. Lengths are all-gathered first, so an oversized message is refused before
it is read; every rank decodes every message, so a malformed one stops every rank with the same one-line error naming
the peer rank (no rank is left waiting).
"""

from islands_kit.comm.torch_dist.errors import DEFAULT_TIMEOUT_S, DistributedError, dist_timeout_s
from islands_kit.comm.torch_dist.frames import META_BYTES
from islands_kit.comm.torch_dist.transport import TorchDistTransport

__all__ = ["DEFAULT_TIMEOUT_S", "META_BYTES", "DistributedError", "TorchDistTransport", "dist_timeout_s"]
