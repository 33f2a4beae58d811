fn main() {
    std::process::exit(maka_acp::cli::main());
}
