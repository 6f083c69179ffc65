//! `cargo run --release -p myriad-bench --example routing -- --chunks 250000,10000000 --changed 10`
//! runs the routing benchmark without the server binary.

use clap::Parser;

#[derive(Parser)]
#[command(name = "routing", about = "Routing-table benchmark: myriad vs MongoDB 5.0 and 7.0 models")]
struct Command {
    #[command(flatten)]
    routing: myriad_bench::routing::RoutingArgs,
}

fn main() -> std::process::ExitCode {
    let command = Command::parse();
    match myriad_bench::routing::run(&command.routing) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("routing: {message}");
            std::process::ExitCode::FAILURE
        }
    }
}
