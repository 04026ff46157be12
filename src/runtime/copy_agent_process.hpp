// The copy agent's process (transport/copy_agent.hpp says what it is for):
// the body of the nvst-copy-agent program, which a PE's proxy starts.
#pragma once

namespace nvst {

// argv: parent pid, PCI bus id of the GPU, inbox bytes, heap bytes, heap
// handle ("fd": descriptor 5; "ipc:<hex>": a CUDA IPC handle), spin in us.
// Inherited descriptors: 3 the inboxes, 4 the channel, 5 the heap (fd).
int run_copy_agent(int argc, char** argv);

}  // namespace nvst
