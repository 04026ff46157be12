# torchrun --nproc_per_node=2 examples/torch_quickstart.py   (PYTHONPATH=build/python, or pip install .)
import os, torch, torch.distributed as dist
import nvshmem_tutorial as nt, nvshmem_tutorial.distributed as nd
torch.cuda.set_device(int(os.environ["LOCAL_RANK"])); dist.init_process_group("nccl")
nt.init_from_torch()                                   # unique ID through a gloo group, never NCCL
x = nt.alloc_tensor((4,), torch.float32)       # symmetric: the same on every rank
x.fill_(dist.get_rank() + 1); nd.all_reduce(x)         # 1 + 2 = 3 on 2 ranks
nt.nvshmem_barrier()                                   # every rank's all_reduce is done
peer = nt.peer_tensor(x, (dist.get_rank() + 1) % dist.get_world_size())  # the neighbour's copy, over NVLink
print(dist.get_rank(), x.tolist(), peer.tolist())
nt.nvshmem_free_tensor(x); nt.finalize(); dist.destroy_process_group()
