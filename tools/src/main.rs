//! `hca`: the command-line tool of the mlx5 driver.

fn main() {
    println!("hca: not yet implemented");
}
