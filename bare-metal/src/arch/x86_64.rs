//! x86_64, QEMU `q35`: the PVH entry (32-bit protected mode, paging off)
//! with its own page tables into long mode, the COM1 console, the ACPI PM
//! timer as clock, `isa-debug-exit` for the status, and the BARs as
//! SeaBIOS assigned them (it runs before the PVH entry).
//!
//! No IDT is installed: an exception triple-faults, which QEMU with
//! `-no-reboot` turns into exit status 0, never a pass (see
//! [`exit`]).

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use core::time::Duration;

use hca_bare_metal::q35;
use platform::Error;
use platform::bare_metal::pci::{BarInfo, COMMAND_MEMORY, Ecam, PciFunction};

/// The banner's machine.
pub const NAME: &str = "x86_64 QEMU q35";
/// ECAM window.
pub const ECAM: usize = q35::ECAM;
/// ECAM length.
pub const ECAM_LEN: usize = q35::ECAM_LEN;
/// The exchange page.
pub const XCHG: u64 = q35::XCHG;
/// What the identity map covers: BARs must lie below.
const MAPPED: u64 = 4 << 30;

// The PVH entry, announced by the Xen ELF note XEN_ELFNOTE_PHYS32_ENTRY
// (18) that QEMU's `-kernel` looks for: flat 32-bit protected mode, paging
// off, %ebx the start info (unused: the memory map is fixed by `-m`).
// Zero bss (the page tables are in it), identity map the first 4 GiB with
// 2 MiB pages (RAM below 128 MiB write-back; above, where ECAM and the PCI
// window are, uncached), PAE, EFER.LME, paging on, a 64-bit code segment,
// stack, then `kmain`. The note's descriptor is 8 bytes (as Linux's), and
// the section 4-aligned: QEMU aligns the name by the segment's alignment.
core::arch::global_asm!(
    r#"
.section .note.Xen, "a", @note
.balign 4
.long 4
.long 8
.long 18
.asciz "Xen"
.quad _start32

.section .text.boot, "ax"
.code32
.global _start32
_start32:
    cli
    cld
    mov     $__bss_start, %edi
    mov     $__bss_end, %ecx
    sub     %edi, %ecx
    shr     $2, %ecx
    xor     %eax, %eax
    rep stosl
    mov     $__page_tables, %edi
    lea     0x1003(%edi), %eax
    mov     %eax, (%edi)
    lea     0x2003(%edi), %eax
    mov     %eax, 0x1000(%edi)
    add     $0x1000, %eax
    mov     %eax, 0x1008(%edi)
    add     $0x1000, %eax
    mov     %eax, 0x1010(%edi)
    add     $0x1000, %eax
    mov     %eax, 0x1018(%edi)
    lea     0x2000(%edi), %edx
    xor     %ecx, %ecx
.Lpde:
    mov     %ecx, %eax
    shl     $21, %eax
    or      $0x83, %eax
    cmp     $64, %ecx
    jb      .Lwb
    or      $0x18, %eax
.Lwb:
    mov     %eax, (%edx,%ecx,8)
    inc     %ecx
    cmp     $2048, %ecx
    jb      .Lpde
    mov     %edi, %cr3
    mov     %cr4, %eax
    or      $0x20, %eax
    mov     %eax, %cr4
    mov     $0xc0000080, %ecx
    rdmsr
    or      $0x100, %eax
    wrmsr
    mov     %cr0, %eax
    or      $0x80000001, %eax
    mov     %eax, %cr0
    lgdt    .Lgdt_ptr
    ljmp    $0x08, $.Lstart64

.code64
.Lstart64:
    mov     $0x10, %ax
    mov     %ax, %ds
    mov     %ax, %es
    mov     %ax, %ss
    mov     %ax, %fs
    mov     %ax, %gs
    mov     $__stack_top, %rsp
    call    kmain
.Lhalt:
    hlt
    jmp     .Lhalt

.section .rodata.gdt, "a"
.balign 8
.Lgdt:
    .quad 0
    .quad 0x00af9a000000ffff
    .quad 0x00cf92000000ffff
.Lgdt_ptr:
    .word .Lgdt_ptr - .Lgdt - 1
    .long .Lgdt
"#,
    options(att_syntax)
);

fn inb(port: u16) -> u8 {
    let v: u8;
    // SAFETY: a port read of a device this image alone drives (the UART's
    // line status); no memory is touched.
    unsafe { core::arch::asm!("in al, dx", out("al") v, in("dx") port, options(nomem, nostack)) };
    v
}

fn outb(port: u16, v: u8) {
    // SAFETY: a port write to the UART this image alone drives.
    unsafe { core::arch::asm!("out dx, al", in("dx") port, in("al") v, options(nomem, nostack)) };
}

fn inl(port: u16) -> u32 {
    let v: u32;
    // SAFETY: a port read of the ACPI PM timer (read-only register).
    unsafe { core::arch::asm!("in eax, dx", out("eax") v, in("dx") port, options(nomem, nostack)) };
    v
}

/// One console byte on COM1 (once the transmit holding register is
/// empty: line status bit 5).
pub fn put(b: u8) {
    while inb(q35::COM1 + 5) & (1 << 5) == 0 {}
    outb(q35::COM1, b);
}

/// Ends QEMU through `isa-debug-exit` with [`q35::exit_code`]`(status)`.
pub fn exit(status: u32) -> ! {
    // SAFETY: a port write to isa-debug-exit, which ends QEMU; without the
    // device it is ignored and we halt.
    unsafe {
        core::arch::asm!("out dx, eax", in("dx") q35::DEBUG_EXIT, in("eax") status + 1,
            options(nomem, nostack));
    }
    loop {
        // SAFETY: halts the CPU (interrupts are off: for good).
        unsafe { core::arch::asm!("hlt", options(nomem, nostack)) };
    }
}

/// The ACPI PM timer's last reading and the ticks counted so far (it is
/// 24 bits wide and wraps every 4.7 s: `now` must be called more often
/// than that, which the polling loops do; a longer gap only makes time
/// run slow, so timeouts last longer).
static LAST: AtomicU32 = AtomicU32::new(0);
static TICKS: AtomicU64 = AtomicU64::new(0);
/// The PM timer's frequency.
const PM_HZ: u64 = 3_579_545;

/// Time since the machine started, from the ACPI PM timer.
pub fn now() -> Duration {
    let t = inl(q35::PM_TIMER) & 0xff_ffff;
    let last = LAST.swap(t, Ordering::Relaxed);
    let delta = u64::from(t.wrapping_sub(last) & 0xff_ffff);
    let ticks = TICKS.fetch_add(delta, Ordering::Relaxed) + delta;
    Duration::new(
        ticks / PM_HZ,
        ((ticks % PM_HZ) * 1_000_000_000 / PM_HZ) as u32,
    )
}

/// A full barrier: our stores before the peer's view, its stores visible.
pub fn fence() {
    core::sync::atomic::fence(Ordering::SeqCst);
}

/// BAR0 (ivshmem registers) and BAR2 (the ConnectX BAR0) of `f`, where
/// SeaBIOS put them; they must lie in the identity map (below 4 GiB).
/// Memory decoding on. A failure is said on the console.
pub fn bars(f: &PciFunction<Ecam>) -> Result<(BarInfo, BarInfo), ()> {
    let said = |what: &'static str| {
        move |e: Error| {
            say!("FAIL: {what}: {e}");
        }
    };
    let bar0 = f.bar(0).map_err(said("BAR0"))?;
    let bar2 = f.bar(2).map_err(said("BAR2"))?;
    for b in [bar0, bar2] {
        if b.address == 0 || b.address.saturating_add(b.size) > MAPPED {
            say!(
                "FAIL: BAR{} at {:#x} ({} bytes): not assigned by the firmware, or not below 4 GiB where the image maps",
                b.index,
                b.address,
                b.size
            );
            return Err(());
        }
    }
    f.enable(COMMAND_MEMORY);
    Ok((bar0, bar2))
}
