//! The fidelity ledger (`docs/fidelity.md`) names every rule the emulator
//! enforces: each syndrome of [`hca_emu::syndrome::ALL`] has a row, and
//! every row of its tables says where the rule comes from.

const LEDGER: &str = include_str!("../../docs/fidelity.md");

#[test]
fn every_syndrome_has_a_row() {
    let missing: Vec<&str> = hca_emu::syndrome::ALL
        .iter()
        .map(|(_, name, _)| *name)
        .filter(|name| !LEDGER.contains(&format!("`{name}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "rules without a row in docs/fidelity.md: {missing:?}"
    );
}

#[test]
fn every_row_names_its_source() {
    for line in LEDGER.lines().filter(|l| l.starts_with("| ")) {
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        if cells.iter().all(|c| c.chars().all(|ch| ch == '-')) || cells[0] == "rule" {
            continue;
        }
        let source = cells.last().unwrap();
        assert!(!source.is_empty(), "no source in: {line}");
    }
}
