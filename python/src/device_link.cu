// Empty on purpose: a CUDA source in the module makes CMake run the device
// link step, which resolves the relocatable device code of libnvst (the
// collectives' kernels) inside _nvst.so.
