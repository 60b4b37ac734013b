use clap::Parser;

fn main() {
    let cli = deltarl::cli::Cli::parse();
    if let Err(e) = cli.run() {
        // The whole chain: what failed, then why.
        eprintln!("error: {e}");
        for cause in e.chain().skip(1) {
            eprintln!("  caused by: {cause}");
        }
        std::process::exit(1);
    }
}
