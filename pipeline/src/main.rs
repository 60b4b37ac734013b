use clap::Parser;

fn main() {
    let cli = deltarl::cli::Cli::parse();
    if let Err(e) = cli.run() {
        deltarl::failure::show(&e);
        std::process::exit(1);
    }
}
