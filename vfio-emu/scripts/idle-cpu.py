#!/usr/bin/python3
"""CPU an idle process costs under the preload library: opens the emulated
function 0000:00:10.0 through VFIO, maps BAR0, sleeps 3 s, prints its CPU
use (all threads: bridge, emulator).

    cargo build --release -p hca-vfio-emu
    LD_PRELOAD=target/release/libhca_vfio_emu.so HCA_EMU_VFIO='0000:00:10.0=cx4' \
        /usr/bin/python3 vfio-emu/scripts/idle-cpu.py
"""
import os, fcntl, struct, time, mmap, resource
def io(n): return (0x3b<<8)|(100+n)
c=os.open("/dev/vfio/vfio", os.O_RDWR)
g=os.open("/dev/vfio/100", os.O_RDWR)
fcntl.ioctl(g, io(4), struct.pack("i", c))
fcntl.ioctl(c, io(2), 3)
d=fcntl.ioctl(g, io(6), bytearray(b"0000:00:10.0\0"), True)
m=mmap.mmap(d, 32<<20, mmap.MAP_SHARED, mmap.PROT_READ|mmap.PROT_WRITE)
print("fw", hex(struct.unpack(">I", m[0:4])[0]))
r0=resource.getrusage(resource.RUSAGE_SELF); t0=time.time()
time.sleep(3)
r1=resource.getrusage(resource.RUSAGE_SELF); t1=time.time()
cpu=(r1.ru_utime+r1.ru_stime)-(r0.ru_utime+r0.ru_stime)
print("idle CPU: %.1f%% of one core over %.1f s" % (100*cpu/(t1-t0), t1-t0))
