# r114 (1x H100, 16 cores; no GPU in the path): host heaps with signals through the inbox and data direct (new)
# against the previous build (old: over shm all data through the inbox; over tcp fabric atomics for signals)
R=$OUT/r114; mkdir -p $R; echo "new $(cat var/COMMIT), old = the commit before it" > $R/summary.txt
for rep in 1 2; do for prov in shm "tcp;ofi_rxm"; do p=${prov%%;*}; for v in old new; do B=var/bin; [ $v = old ] && B=var/old
  NVST_FABRIC_PROVIDER=$prov timeout 150 $B/nvst bench host --np 2 -b 4K -e 64M -f 4 -n 20 -w 5 --samples 5 > $R/host_${p}_${v}_$rep.log 2>&1
  echo "== $p $v rep $rep rc=$?" >> $R/summary.txt; grep -A9 "op: fabric_put" $R/host_${p}_${v}_$rep.log | grep -E "^ +[0-9]" >> $R/summary.txt
  grep -A2 "op: signal_pingpong" $R/host_${p}_${v}_$rep.log | tail -1 >> $R/summary.txt
done; done; done
cd $R && tar czf ../r114.tgz ./*.log && rm -f ./*.log
