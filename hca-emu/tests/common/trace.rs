//! A small parser of the Linux mlx5_core command dump in
//! `data/prm/trace-mlx5_core-cx4.txt` (independent of the emulator's data
//! file, so it can check it).

/// One dump (`INPUT` or `OUTPUT`) of a command.
#[derive(Clone, Debug, Default)]
pub struct Dump {
    pub entry: Vec<u8>,
    pub blocks: Vec<Vec<u8>>,
}

/// One command: its input and output dumps.
#[derive(Clone, Debug)]
pub struct TraceCmd {
    pub opcode: u16,
    pub input: Dump,
    pub output: Dump,
}

impl TraceCmd {
    pub fn op_mod(&self) -> u16 {
        u16::from_be_bytes([self.input.entry[0x16], self.input.entry[0x17]])
    }
    pub fn input_length(&self) -> usize {
        u32::from_be_bytes(self.input.entry[4..8].try_into().unwrap()) as usize
    }
    pub fn output_length(&self) -> usize {
        u32::from_be_bytes(self.input.entry[0x38..0x3c].try_into().unwrap()) as usize
    }
    /// The input message as far as the dump shows it.
    pub fn input_msg(&self) -> Vec<u8> {
        let mut m = self.input.entry[0x10..0x20].to_vec();
        for b in &self.input.blocks {
            m.extend_from_slice(&b[..512]);
        }
        m.truncate(self.input_length());
        m
    }
    /// The output message as far as the dump shows it.
    pub fn output_msg(&self) -> Vec<u8> {
        let mut m = self.output.entry[0x20..0x30].to_vec();
        for b in &self.output.blocks {
            m.extend_from_slice(&b[..512]);
        }
        m.truncate(self.output_length());
        m
    }
}

pub const TRACE: &str = include_str!("../../../data/prm/trace-mlx5_core-cx4.txt");

pub fn parse() -> Vec<TraceCmd> {
    let mut dumps: Vec<(u16, bool, Dump)> = Vec::new();
    let mut in_block = false;
    for line in TRACE.lines() {
        if let Some(i) = line.find("dump command ") {
            let rest = &line[i..];
            let out = rest.ends_with("OUTPUT");
            let op = rest
                .rfind("(0x")
                .and_then(|j| {
                    let s = &rest[j + 3..];
                    let e = s.find(')')?;
                    u16::from_str_radix(&s[..e], 16).ok()
                })
                .expect("opcode in dump line");
            dumps.push((op, out, Dump::default()));
            in_block = false;
            continue;
        }
        if line.contains("command block:") {
            if let Some(d) = dumps.last_mut() {
                d.2.blocks.push(Vec::new());
            }
            in_block = true;
            continue;
        }
        let Some(close) = line.find("] ") else {
            continue;
        };
        let body = line[close + 2..].trim();
        let Some((off, words)) = body.split_once(": ") else {
            continue;
        };
        if off.len() < 3 || !off.chars().all(|c| c.is_ascii_hexdigit()) {
            continue;
        }
        let ws: Vec<u32> = words
            .split_whitespace()
            .filter_map(|w| u32::from_str_radix(w, 16).ok())
            .collect();
        if ws.len() != 4 {
            continue;
        }
        let Some(d) = dumps.last_mut() else { continue };
        let dst = if in_block {
            d.2.blocks.last_mut().unwrap()
        } else {
            &mut d.2.entry
        };
        for w in ws {
            dst.extend_from_slice(&w.to_be_bytes());
        }
    }
    let mut cmds = Vec::new();
    let mut it = dumps.into_iter();
    while let Some((op, out, input)) = it.next() {
        assert!(!out, "INPUT dump expected");
        let (op2, out2, output) = it.next().expect("OUTPUT dump");
        assert!(out2 && op2 == op);
        cmds.push(TraceCmd {
            opcode: op,
            input,
            output,
        });
    }
    cmds
}
