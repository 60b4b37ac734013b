// An rpath to the torch wheel's libraries (see deltarl-torch-build).
fn main() {
    deltarl_torch_build::rpath();
}
