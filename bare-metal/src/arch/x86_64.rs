//! x86_64, QEMU `q35`: the PVH entry (32-bit protected mode, paging off)
//! with its own page tables into long mode, the COM1 console, the ACPI PM
//! timer as clock, `isa-debug-exit` for the status, and the BARs as
//! SeaBIOS assigned them (it runs before the PVH entry).
//!
//! Exceptions are reported on the console and end the program with
//! status 3, as on aarch64: every vector of the IDT runs on its own stack
//! (IST1 of the TSS), so that a stack overflow, which hits the unmapped
//! 2 MiB guard below the stack, is reported too. Should even that fail
//! (a triple fault), QEMU with `-no-reboot` exits 0, never a pass (see
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
    mov     $__stack_guard, %eax
    shr     $21, %eax
    movl    $0, (%edx,%eax,8)
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
    call    traps_init
    call    kmain
.Lhalt:
    hlt
    jmp     .Lhalt

.macro exc v
.Lexc\v:
    push    $0
    push    $\v
    jmp     .Lexc_common
.endm
.macro exc_err v
.Lexc\v:
    push    $\v
    jmp     .Lexc_common
.endm
    exc 0
    exc 1
    exc 2
    exc 3
    exc 4
    exc 5
    exc 6
    exc 7
    exc_err 8
    exc 9
    exc_err 10
    exc_err 11
    exc_err 12
    exc_err 13
    exc_err 14
    exc 15
    exc 16
    exc_err 17
    exc 18
    exc 19
    exc 20
    exc_err 21
    exc 22
    exc 23
    exc 24
    exc 25
    exc 26
    exc 27
    exc 28
    exc_err 29
    exc_err 30
    exc 31
.Lexc_common:
    pop     %rdi
    pop     %rsi
    mov     (%rsp), %rdx
    mov     %cr2, %rcx
    and     $-16, %rsp
    call    exception

.section .rodata.EXC_STUBS, "a"
.balign 8
.global EXC_STUBS
EXC_STUBS:
.irp v, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
    .quad .Lexc\v
.endr

.section .data.gdt, "aw"
.balign 8
.global BOOT_GDT
BOOT_GDT:
    .quad 0
    .quad 0x00af9a000000ffff
    .quad 0x00cf92000000ffff
    .quad 0
    .quad 0
.Lgdt_ptr:
    .word .Lgdt_ptr - BOOT_GDT - 1
    .long BOOT_GDT
"#,
    options(att_syntax)
);

/// The exception stack (IST1) and the TSS that names it.
#[repr(C, align(16))]
struct ExcStack([u8; 16 << 10]);
static mut EXC_STACK: ExcStack = ExcStack([0; 16 << 10]);
/// The 64-bit TSS (104 bytes, as 32-bit words: IST1 at byte 0x24, the
/// I/O map base at 0x66 set past the end: no I/O bitmap).
static mut TSS: [u32; 26] = [0; 26];
/// The IDT: 32 interrupt gates of 16 bytes.
static mut IDT: [u64; 64] = [0; 64];

unsafe extern "C" {
    /// The exception entry stubs (boot assembly), one per vector.
    static EXC_STUBS: [u64; 32];
    /// The GDT (boot assembly): null, code, data, then the TSS
    /// descriptor (two entries) filled in by [`traps_init`].
    static mut BOOT_GDT: [u64; 5];
}

/// Installs the TSS (IST1 = the exception stack) and an IDT whose 32
/// exception vectors run on IST1 and end in [`exception`]. Called once
/// by the boot code, before `kmain`.
#[unsafe(no_mangle)]
extern "C" fn traps_init() {
    // SAFETY: runs once, single core, before anything else uses these
    // statics; the addresses stored are of statics that live forever;
    // the descriptors follow the SDM's 64-bit TSS and interrupt gate
    // formats, and the selectors (0x08 code, 0x18 TSS) are the boot
    // GDT's.
    unsafe {
        let stack = core::ptr::addr_of_mut!(EXC_STACK) as u64 + (16 << 10);
        let tss = &mut *core::ptr::addr_of_mut!(TSS);
        tss[9] = stack as u32;
        tss[10] = (stack >> 32) as u32;
        tss[25] = 104 << 16;
        let base = tss.as_ptr() as u64;
        let limit = 103u64;
        let gdt = &mut *core::ptr::addr_of_mut!(BOOT_GDT);
        gdt[3] = (limit & 0xffff)
            | ((base & 0xff_ffff) << 16)
            | (0x89 << 40)
            | (((limit >> 16) & 0xf) << 48)
            | (((base >> 24) & 0xff) << 56);
        gdt[4] = base >> 32;
        core::arch::asm!("ltr {0:x}", in(reg) 0x18u16, options(nostack));
        let idt = &mut *core::ptr::addr_of_mut!(IDT);
        let stubs = &*core::ptr::addr_of!(EXC_STUBS);
        for (v, &off) in stubs.iter().enumerate() {
            idt[2 * v] = (off & 0xffff)
                | (0x08 << 16)
                | (1 << 32)
                | (0x8e << 40)
                | (((off >> 16) & 0xffff) << 48);
            idt[2 * v + 1] = off >> 32;
        }
        let ptr: [u16; 5] = {
            let b = idt.as_ptr() as u64;
            [
                (core::mem::size_of_val(idt) - 1) as u16,
                b as u16,
                (b >> 16) as u16,
                (b >> 32) as u16,
                (b >> 48) as u16,
            ]
        };
        core::arch::asm!("lidt [{0}]", in(reg) ptr.as_ptr(), options(nostack));
    }
}

/// An exception: said on the console, status 3.
#[unsafe(no_mangle)]
extern "C" fn exception(vector: u64, error: u64, rip: u64, cr2: u64) -> ! {
    say!("FAIL: exception {vector} (error code {error:#x}, RIP {rip:#x}, CR2 {cr2:#x})");
    exit(3)
}

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

/// Ends QEMU through `isa-debug-exit` with
/// [`q35::debug_exit_value`]`(status)`.
pub fn exit(status: u32) -> ! {
    // SAFETY: a port write to isa-debug-exit, which ends QEMU; without the
    // device it is ignored and we halt.
    unsafe {
        core::arch::asm!("out dx, eax", in("dx") q35::DEBUG_EXIT, in("eax") q35::debug_exit_value(status),
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
