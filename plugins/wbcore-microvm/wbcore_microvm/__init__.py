"""wbcore-microvm: the microvm isolation tier on QEMU (kvm where a guest answers, else tcg)."""
