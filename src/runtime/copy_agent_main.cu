// nvst-copy-agent: the copy agent's program (transport/copy_agent.hpp).
#include "runtime/copy_agent_process.hpp"

int main(int argc, char** argv) { return nvst::run_copy_agent(argc, argv); }
