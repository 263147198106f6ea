//! The `baton` binary: parse the command line, then hand over to `baton::app`.

fn main() {
    let code = baton::app::main_with_args(std::env::args_os().skip(1));
    std::process::exit(code);
}
