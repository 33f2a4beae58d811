#!/usr/bin/env python3
"""Builds the `maka-acp` wheel: the native binary as the wheel's script, for `pip install` and
`uvx maka-acp`. Standard library only, so it runs offline on a build machine.

    dist/python/build_wheel.py BINARY OUT_DIR

The platform tag is read off the binary, not assumed: the newest glibc symbol version it needs
gives `manylinux_2_<minor>_x86_64`, and every shared library it links must be one the
manylinux policy allows (libc and its kin). A binary that links no libc dynamically (static,
musl) is refused: this project builds against glibc. The wheel is reproducible: sorted entries,
fixed times, fixed modes.
"""
import base64, hashlib, io, os, re, subprocess, sys, zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
# PEP 600's manylinux policy: what a manylinux binary may link against.
ALLOWED_LIBS = {"libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1",
                "libgcc_s.so.1", "ld-linux-x86-64.so.2", "libutil.so.1"}


def cargo_package():
    """Cargo.toml's [package] strings: name, version, description, repository, license."""
    text = open(os.path.join(ROOT, "Cargo.toml")).read()
    fields = ("name", "version", "description", "repository", "license")
    return {f: re.search(rf'^{f} = "(.*)"', text, re.M).group(1) for f in fields}


def platform_tag(binary):
    headers = subprocess.run(["objdump", "-p", binary], capture_output=True, text=True, check=True).stdout
    if "file format elf64-x86-64" not in headers:
        sys.exit(f"{binary} is not an x86-64 ELF binary")
    needed = set(re.findall(r"^\s*NEEDED\s+(\S+)", headers, re.M))
    if not needed:
        sys.exit(f"{binary} links no libc dynamically; this builder makes manylinux wheels only")
    if needed - ALLOWED_LIBS:
        sys.exit(f"{binary} links {sorted(needed - ALLOWED_LIBS)}, which manylinux does not allow")
    # The glibc versions it needs, from its version references: GLIBC_2.N, and
    # GLIBC_ABI_DT_RELR (packed relocations) which only glibc 2.36 provides.
    references = headers[headers.find("Version References:"):]
    minor = max(int(m) for m in re.findall(r"\bGLIBC_2\.(\d+)", references))
    if "GLIBC_ABI_DT_RELR" in references:
        minor = max(minor, 36)
    return f"manylinux_2_{minor}_x86_64", sorted(needed), minor


def main():
    binary, out = sys.argv[1], sys.argv[2]
    cargo = cargo_package()
    name, version = cargo["name"], cargo["version"]
    dist = name.replace("-", "_")
    tag, needed, minor = platform_tag(binary)
    wheel_name = f"{dist}-{version}-py3-none-{tag}.whl"
    readme = open(os.path.join(HERE, "README.md")).read()
    metadata = "\n".join([
        "Metadata-Version: 2.1",
        f"Name: {name}",
        f"Version: {version}",
        f"Summary: {cargo['description']}",
        f"Home-page: {cargo['repository']}",
        "Author: The maka-acp developers",
        f"License: {cargo['license']}",
        "Classifier: Programming Language :: Rust",
        "Classifier: Operating System :: POSIX :: Linux",
        "Classifier: Environment :: Console",
        "Requires-Python: >=3.8",
        "Description-Content-Type: text/markdown",
        "", readme])
    wheel = "\n".join(["Wheel-Version: 1.0", "Generator: maka-acp dist/python/build_wheel.py",
                       "Root-Is-Purelib: false", f"Tag: py3-none-{tag}", ""])
    files = [  # (path in the wheel, bytes, executable)
        (f"{dist}/__init__.py", open(os.path.join(HERE, "maka_acp", "__init__.py"), "rb").read(), False),
        (f"{dist}/__main__.py", open(os.path.join(HERE, "maka_acp", "__main__.py"), "rb").read(), False),
        (f"{dist}-{version}.data/scripts/{name}", open(binary, "rb").read(), True),
        (f"{dist}-{version}.dist-info/METADATA", metadata.encode(), False),
        (f"{dist}-{version}.dist-info/WHEEL", wheel.encode(), False),
    ]
    for lic in ["LICENSE-MIT", "LICENSE-APACHE"]:
        files.append((f"{dist}-{version}.dist-info/{lic}",
                      open(os.path.join(ROOT, lic), "rb").read(), False))
    record_path = f"{dist}-{version}.dist-info/RECORD"
    record = io.StringIO()
    for path, data, _ in files:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.write(f"{path},sha256={digest},{len(data)}\n")
    record.write(f"{record_path},,\n")
    files.append((record_path, record.getvalue().encode(), False))

    os.makedirs(out, exist_ok=True)
    target = os.path.join(out, wheel_name)
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as z:
        # RECORD last, as the wheel spec recommends; the rest in a fixed order.
        for path, data, executable in sorted(files[:-1]) + [files[-1]]:
            info = zipfile.ZipInfo(path, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = (0o100755 if executable else 0o100644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    print(f"{target}\t{tag}\t{' '.join(needed)}")


if __name__ == "__main__":
    main()
