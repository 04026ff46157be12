// The doorbell of an inbox piece (proxy.cpp, GPU heaps): the piece's write
// carries 4 bytes of remote CQ data naming its sender and its sequence
// number, and the target rings the doorbell itself when its provider
// reports the write landed. 4 bytes are what every provider we take carries
// (verbs and efa: immediate data), so the seq travels as its low 16 bits and
// the target restores the rest: a sender writes piece seq only after piece
// seq - window was applied, so every piece in flight from one sender lies in
// [next expected, next expected + window), window <= 2^16.
#pragma once

#include <cstdint>

namespace nvst::inbox {

constexpr int kMaxPes = 1 << 16;  // senders a 16-bit field can name

constexpr std::uint32_t bell_data(int src, std::uint64_t seq) {
  return (static_cast<std::uint32_t>(src) << 16) | static_cast<std::uint32_t>(seq & 0xffff);
}
constexpr int bell_sender(std::uint32_t data) { return static_cast<int>(data >> 16); }
// The full seq of a piece from bell_sender(data), given the next piece
// expected from that sender.
constexpr std::uint64_t bell_seq(std::uint32_t data, std::uint64_t next_expected) {
  return next_expected + ((static_cast<std::uint64_t>(data & 0xffff) - next_expected) & 0xffff);
}

}  // namespace nvst::inbox
