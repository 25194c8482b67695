"""A repository rule that wraps a Debian-packaged library found by pkg-config.

The generated repository has one target, `//:lib`, a cc_library that carries the
library's link flags and preprocessor defines. Headers come from /usr/include, which the
toolchain already searches, so no header files are declared.
"""

def _pkg_config(ctx, args):
    result = ctx.execute(["pkg-config"] + args)
    if result.return_code != 0:
        fail("pkg-config %s failed (is the Debian -dev package installed? run `make deps`): %s" %
             (" ".join(args), result.stderr))
    return [f for f in result.stdout.strip().split(" ") if f]

def _system_library_impl(ctx):
    linkopts = []
    defines = []
    if ctx.attr.pkg_config:
        linkopts = _pkg_config(ctx, ["--libs"] + ctx.attr.pkg_config)
        for flag in _pkg_config(ctx, ["--cflags"] + ctx.attr.pkg_config):
            if flag.startswith("-D"):
                defines.append(flag[2:])
    linkopts = linkopts + ctx.attr.extra_linkopts
    ctx.file("WORKSPACE", "workspace(name = \"%s\")\n" % ctx.name)
    ctx.file("BUILD", """cc_library(
    name = "lib",
    linkopts = {linkopts},
    defines = {defines},
    visibility = ["//visibility:public"],
)
""".format(linkopts = repr(linkopts), defines = repr(defines)))

system_library = repository_rule(
    implementation = _system_library_impl,
    local = True,
    attrs = {
        "pkg_config": attr.string_list(doc = "pkg-config module names"),
        "extra_linkopts": attr.string_list(doc = "flags pkg-config does not give"),
    },
)
