# scripts/multihost.sh --transport: the MPI's own words about the transports it chose, marked with
# `multihost: transport:`; its other diagnostics dropped, everything else passed through.
#   Intel MPI (I_MPI_DEBUG=5): the libfabric provider (tcp between hosts), the tuning file it loads
#     (tuning_generic_shm-ofi.dat: shared memory within a node, OFI between; shm.dat: one node), and
#     the rank/pid/node table.
#   Open MPI (btl_base_verbose=100, btl self,sm,tcp): "Using sm btl for send to [[job,1],R] on node
#     hN" and "Using tcp btl for send to ..." for every pair of ranks that talked.
/MPI startup\(\): (libfabric provider|Load tuning file|Rank +Pid +Node name|[0-9]+ +[0-9]+ +h[0-9]+ )/ {
  sub(/^.*MPI startup\(\): /, ""); print "multihost: transport: " $0; fflush(); next
}
/MPI startup\(\)/ { next }
/mca: bml: Using [a-z]+ btl for send to/ { print "multihost: transport: " $0; fflush(); next }
/^\[h[0-9]+:[0-9]+\] (mca|select|btl)[: ]/ { next }
{ print; fflush() }
