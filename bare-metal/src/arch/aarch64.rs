//! aarch64, QEMU `virt`: boot code (MMU with an identity map), the PL011
//! console, the generic timer, semihosting exit, and the BARs (assigned
//! here: nothing before us did).

use core::time::Duration;

use hca_bare_metal::virt;
use platform::Error;
use platform::bare_metal::pci::{BarInfo, BarWindow, COMMAND_MEMORY, Ecam, PciFunction};

/// The banner's machine.
pub const NAME: &str = "aarch64 QEMU virt";
/// ECAM window and length.
pub const ECAM: usize = virt::ECAM;
/// ECAM length.
pub const ECAM_LEN: usize = virt::ECAM_LEN;
/// The exchange page.
pub const XCHG: u64 = virt::XCHG;

// Boot: park every core but 0, stack, FP/SIMD on (the compiler uses the
// NEON registers), bss zeroed, exception vectors, MMU on with an identity
// map (0-1 GiB device memory: UART, PCI windows, ECAM; 1-2 GiB normal
// write-back memory: RAM), then `kmain`.
core::arch::global_asm!(
    r#"
.section .text.boot, "ax"
.global _start
_start:
    mrs     x0, mpidr_el1
    and     x0, x0, #0xff
    cbnz    x0, 9f
    ldr     x0, =__stack_top
    mov     sp, x0
    mov     x0, #(3 << 20)
    msr     cpacr_el1, x0
    isb
    ldr     x0, =__bss_start
    ldr     x1, =__bss_end
1:  cmp     x0, x1
    b.hs    2f
    str     xzr, [x0], #8
    b       1b
2:  ldr     x0, =vectors
    msr     vbar_el1, x0
    ldr     x0, =0xff00
    msr     mair_el1, x0
    ldr     x0, =(25 | (1 << 8) | (1 << 10) | (3 << 12) | (1 << 23) | (2 << 32))
    msr     tcr_el1, x0
    ldr     x0, =translation_table
    msr     ttbr0_el1, x0
    tlbi    vmalle1
    dsb     ish
    isb
    mrs     x0, sctlr_el1
    orr     x0, x0, #1
    orr     x0, x0, #(1 << 2)
    orr     x0, x0, #(1 << 12)
    msr     sctlr_el1, x0
    isb
    bl      kmain
9:  wfe
    b       9b

.macro vector kind
    .balign 0x80
    mov     x0, #\kind
    mrs     x1, esr_el1
    mrs     x2, elr_el1
    mrs     x3, far_el1
    b       exception
.endm

.balign 0x800
vectors:
    vector 0
    vector 1
    vector 2
    vector 3
    vector 4
    vector 5
    vector 6
    vector 7
    vector 8
    vector 9
    vector 10
    vector 11
    vector 12
    vector 13
    vector 14
    vector 15

.section .rodata.translation_table, "a"
.balign 4096
translation_table:
    .quad 0x0000000000000401
    .quad 0x0000000040000705
    .fill 510, 8, 0
"#
);

/// PL011 data register and flag register (TX FIFO full: bit 5).
const UART_DR: usize = virt::UART;
const UART_FR: usize = virt::UART + 0x18;

/// One console byte.
pub fn put(b: u8) {
    // SAFETY: the PL011's registers, mapped as device memory by the
    // identity map; 32-bit volatile accesses as the PL011 wants.
    unsafe {
        while core::ptr::read_volatile(UART_FR as *const u32) & (1 << 5) != 0 {}
        core::ptr::write_volatile(UART_DR as *mut u32, u32::from(b));
    }
}

/// Ends the program through semihosting (SYS_EXIT with
/// ADP_Stopped_ApplicationExit and `status`: QEMU exits with it).
pub fn exit(status: u32) -> ! {
    let block: [u64; 2] = [0x20026, u64::from(status)];
    // SAFETY: the semihosting call reads the two-word block and does not
    // return (QEMU exits); with semihosting off it is an undefined
    // instruction, reported by the exception handler.
    unsafe {
        core::arch::asm!(
            "hlt #0xf000",
            in("x0") 0x18u64,
            in("x1") block.as_ptr(),
            options(nostack)
        );
    }
    loop {
        core::hint::spin_loop();
    }
}

/// The generic timer's virtual count, as time.
pub fn now() -> Duration {
    let (count, freq): (u64, u64);
    // SAFETY: reads of the EL0-accessible counter registers.
    unsafe {
        core::arch::asm!("isb; mrs {}, cntvct_el0", out(reg) count, options(nostack));
        core::arch::asm!("mrs {}, cntfrq_el0", out(reg) freq, options(nostack));
    }
    let freq = freq.max(1);
    let secs = count / freq;
    let nanos = (count % freq) * 1_000_000_000 / freq;
    Duration::new(secs, nanos as u32)
}

#[unsafe(no_mangle)]
extern "C" fn exception(kind: u64, esr: u64, elr: u64, far: u64) -> ! {
    say!("FAIL: exception {kind} (ESR {esr:#x}, ELR {elr:#x}, FAR {far:#x})");
    exit(3)
}

/// A full barrier: our stores before the peer's view, its stores visible.
pub fn fence() {
    // SAFETY: a barrier instruction.
    unsafe { core::arch::asm!("dmb sy", options(nostack)) };
}

/// BAR0 (ivshmem registers) and BAR2 (the ConnectX BAR0) of `f`: no
/// firmware ran before us, so they are assigned here, the largest first
/// (each is aligned to its size), and memory decoding enabled.
/// A failure is said on the console.
pub fn bars(f: &PciFunction<Ecam>) -> Result<(BarInfo, BarInfo), ()> {
    let said = |what: &'static str| {
        move |e: Error| {
            say!("FAIL: {what}: {e}");
        }
    };
    let mut window =
        BarWindow::new(virt::PCI_MMIO, virt::PCI_MMIO_LEN).map_err(said("MMIO window"))?;
    let bar2 = f.assign_bar(2, &mut window).map_err(said("BAR2"))?;
    let bar0 = f.assign_bar(0, &mut window).map_err(said("BAR0"))?;
    f.enable(COMMAND_MEMORY);
    Ok((bar0, bar2))
}
