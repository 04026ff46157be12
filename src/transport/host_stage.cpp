// Host threads stage their GPU-sourced puts themselves (host_stage.hpp).
#include "transport/host_stage.hpp"

#include <algorithm>
#include <deque>

#include "nvst/error.hpp"

namespace nvst::proxy {

HostStager::HostStager(char* slots, std::uint64_t* done, int n_slots, std::size_t piece_bytes, int device,
                       HostProducer& producer)
    : slots_(slots),
      done_(done),
      n_slots_(static_cast<std::uint64_t>(n_slots)),
      piece_bytes_(piece_bytes),
      device_(device),
      producer_(producer) {
  NVST_REQUIRE(n_slots > 0 && piece_bytes > 0 && piece_bytes <= kPieceBytes, "HostStager: ", n_slots, " slots of ",
               piece_bytes, " bytes");
}

HostStager::~HostStager() {
  for (auto& lane : lanes_) {
    cudaStreamSynchronize(lane->stream);
    for (cudaEvent_t e : lane->copied) cudaEventDestroy(e);
    cudaStreamDestroy(lane->stream);
  }
}

HostStager::Lane* HostStager::take_lane() {
  std::lock_guard<std::mutex> lock(lanes_mu_);
  if (!idle_.empty()) {
    Lane* lane = idle_.back();
    idle_.pop_back();
    return lane;
  }
  auto lane = std::make_unique<Lane>();
  // Non-blocking: the copies never wait for work on the legacy default
  // stream (a kernel there may wait for this very put).
  NVST_CHECK_CUDA(cudaStreamCreateWithFlags(&lane->stream, cudaStreamNonBlocking));
  for (cudaEvent_t& e : lane->copied) NVST_CHECK_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  lanes_.push_back(std::move(lane));
  return lanes_.back().get();
}

void HostStager::give_lane(Lane* lane) {
  std::lock_guard<std::mutex> lock(lanes_mu_);
  idle_.push_back(lane);
}

std::uint64_t HostStager::put(const Command& c, Op op, bool then_wait) {
  NVST_REQUIRE((op == Op::kPut || op == Op::kPutSignal) && c.bytes > 0, "HostStager: op ", static_cast<int>(op), " of ",
               c.bytes, " bytes is not a put with data");
  // The lanes' streams and the copies belong to the heap's GPU, whichever
  // device this thread had current (restored on the way out).
  int was = -1;
  NVST_CHECK_CUDA(cudaGetDevice(&was));
  if (was != device_) NVST_CHECK_CUDA(cudaSetDevice(device_));
  Lane* lane = take_lane();
  struct Piece {
    std::uint64_t ticket;
    Command cmd;
    Op op;
    int event;
  };
  std::deque<Piece> queued;  // copies queued, not yet posted, in order
  std::uint64_t last = 0;
  auto post_oldest = [&](bool final_piece) {
    const Piece& p = queued.front();
    NVST_CHECK_CUDA(cudaEventSynchronize(lane->copied[p.event]));
    last = producer_.push(p.cmd, p.op, then_wait && final_piece);
    queued.pop_front();
  };
  const char* src = reinterpret_cast<const char*>(c.src);
  try {
    int k = 0;
    for (std::size_t done = 0; done < c.bytes; ++k) {
      const std::size_t piece = std::min<std::size_t>(piece_bytes_, c.bytes - done);
      const std::uint64_t t = tickets_.fetch_add(1, std::memory_order_relaxed);
      const std::uint64_t* word = &done_[t % n_slots_];
      auto slot_free = [&] {
        return t < n_slots_ ||
               std::atomic_ref<const std::uint64_t>(*word).load(std::memory_order_acquire) >= t - n_slots_ + 1;
      };
      if (!slot_free()) {
        // Never wait for a slot while holding unposted ones (host_stage.hpp).
        while (!queued.empty()) post_oldest(false);
        producer_.wait("a free staging slot for a put from GPU memory", slot_free);
      }
      if (queued.size() == static_cast<std::size_t>(kWindow)) post_oldest(false);  // its event is reused next
      // The acquire load above ordered the proxy's release of this slot
      // (its previous write completed) before this copy into it.
      char* data = slots_ + (t % n_slots_) * kSlotBytes + kPieceHeaderBytes;
      const int event = k % kWindow;
      Piece p{t, Command{}, Op::kPutStaged, event};
      queued.push_back(p);  // before the copy: a failed call below still releases the slot
      NVST_CHECK_CUDA(cudaMemcpyAsync(data, src + done, piece, cudaMemcpyDefault, lane->stream));
      NVST_CHECK_CUDA(cudaEventRecord(lane->copied[event], lane->stream));
      Command& cmd = queued.back().cmd;
      cmd.dest = c.dest + done;
      cmd.src = t;
      cmd.bytes = piece;
      cmd.pe = c.pe;
      cmd.src_on_device = 1;
      cmd.reserved = done == 0 ? c.bytes : 0;
      done += piece;
      if (done == c.bytes && op == Op::kPutSignal) {
        cmd.sig = c.sig;
        cmd.sig_value = c.sig_value;
        cmd.sig_op = c.sig_op;
        queued.back().op = Op::kPutSignalStaged;
      }
    }
    while (!queued.empty()) post_oldest(queued.size() == 1);
  } catch (...) {
    // Slots taken but not posted would stall every later ticket of theirs:
    // hand them back unsent (this put failed, and says so). No one else
    // writes such a word meanwhile: the proxy only for posted pieces, and
    // the slot's next ticket waits for this value.
    cudaStreamSynchronize(lane->stream);
    for (const Piece& p : queued)
      std::atomic_ref<std::uint64_t>(done_[p.ticket % n_slots_]).store(p.ticket + 1, std::memory_order_release);
    give_lane(lane);
    if (was != device_) cudaSetDevice(was);
    throw;
  }
  give_lane(lane);
  if (was != device_) NVST_CHECK_CUDA(cudaSetDevice(was));
  return last;
}

}  // namespace nvst::proxy
