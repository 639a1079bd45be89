"""Where the operator's connection comes from, every setting honoured or refused at start.

`--kubeconfig`, else ``$KUBECONFIG`` (several files separated by ``:`` are merged as client-go
merges them: the first file to name a cluster, user or context, or to set current-context, wins,
and a relative path is read relative to the file that holds it), else the in-cluster
ServiceAccount, else ``~/.kube/config``.

Of the current context's cluster and user, every key is honoured as client-go honours it:

- cluster: `server`, `certificate-authority` (file or ``-data``), `insecure-skip-tls-verify`,
  `tls-server-name` (the name the certificate is checked for), `proxy-url`, and
  `disable-compression` (the operator never asks for compressed answers);
- user: `token` or `tokenFile` (the file wins, as in client-go, and is read again every minute and
  after a 401), `client-certificate`/`client-key` (files or ``-data``), `username`/`password`
  (basic), impersonation (`as`, `as-uid`, `as-groups`, `as-user-extra`: Impersonate-* headers, the
  server then checks the impersonated identity's rights), and `exec` plugins (`execcred.py`).

Proxies: the cluster's `proxy-url`, else the ``HTTPS_PROXY``/``https_proxy`` variable (for an
http:// server ``HTTP_PROXY``/``http_proxy``) unless ``NO_PROXY``/``no_proxy`` lists the server
(``*``, host names, which also match their subdomains, ``.suffix`` for subdomains only, IP
addresses and CIDR ranges, each with an optional ``:port``), as Go's ProxyFromEnvironment decides
for client-go; like it, a loopback server (``localhost``, 127.0.0.0/8, ::1) is never sent through a
proxy named by the environment. http:// and https:// proxies are spoken, tunnelling with CONNECT
(an https:// proxy's certificate is checked with the cluster's CA, as Go does); SOCKS is refused.

Anything else fails at start with a message naming the key (a ``socks5://`` proxy, an
`auth-provider`, an unknown key, a token with basic auth, `as-groups` without `as`...):
a setting is never silently dropped. The context's `namespace` is not a connection setting (the
operator's own ``--namespace`` says what it watches), nor are `extensions` and `preferences`.
"""

from __future__ import annotations

import base64
import ipaddress
import os
import ssl
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainop_core.operator.connection import (
    ConfigError,
    Connection,
    Proxy,
    TokenFile,
    tls_context,
)

IN_CLUSTER_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"
IN_CLUSTER_CA = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"

TOP_KEYS = frozenset(
    {"apiVersion", "kind", "clusters", "users", "contexts", "current-context", "preferences",
     "extensions"}
)  # fmt: skip
CONTEXT_KEYS = frozenset({"cluster", "user", "namespace", "extensions"})
CLUSTER_KEYS = frozenset(
    {"server", "certificate-authority", "certificate-authority-data", "insecure-skip-tls-verify",
     "tls-server-name", "proxy-url", "disable-compression", "extensions"}
)  # fmt: skip
USER_KEYS = frozenset(
    {"token", "tokenFile", "client-certificate", "client-certificate-data", "client-key",
     "client-key-data", "username", "password", "as", "as-uid", "as-groups", "as-user-extra",
     "exec", "extensions"}
)  # fmt: skip
#: Keys client-go may know that the operator refuses, and why.
REFUSED = {
    "auth-provider": "auth-provider plugins are not supported (client-go dropped its gcp and "
    "azure ones): use an exec credential plugin instead",
}
#: Characters of an HTTP header name that client-go leaves unescaped in Impersonate-Extra-<key>.
_TOKEN_CHARS = "!#$&'*+-.^_`|~"

Environ = Mapping[str, str]


@dataclass(frozen=True)
class _Entry:
    """A named cluster, user or context and the directory of the file that defined it."""

    value: dict[str, Any]
    base: Path


def load_connection(kubeconfig: str = "", environ: Environ = os.environ) -> Connection:
    """`--kubeconfig`, else $KUBECONFIG, else in-cluster, else ~/.kube/config."""
    if kubeconfig:  # one file, as client-go's --kubeconfig
        return kubeconfig_connection(Path(kubeconfig).expanduser(), environ=environ)
    listed = [Path(p).expanduser() for p in environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    if listed:  # client-go skips a missing file of $KUBECONFIG's list
        files = [f for f in listed if f.exists()] or listed[:1]
        return kubeconfig_connection(*files, environ=environ)
    if environ.get("KUBERNETES_SERVICE_HOST") and os.path.exists(IN_CLUSTER_TOKEN):
        return in_cluster_connection(environ=environ)
    return kubeconfig_connection(Path("~/.kube/config").expanduser(), environ=environ)


def in_cluster_connection(
    token_file: str = IN_CLUSTER_TOKEN, ca_file: str = IN_CLUSTER_CA, environ: Environ = os.environ
) -> Connection:
    """The pod's ServiceAccount: $KUBERNETES_SERVICE_HOST/PORT, its token and CA (and the
    proxy environment variables, as client-go's in-cluster configuration)."""
    host, port = environ["KUBERNETES_SERVICE_HOST"], environ.get("KUBERNETES_SERVICE_PORT")
    if ":" in host:  # IPv6
        host = f"[{host}]"
    server = f"https://{host}:{port or 443}"
    token = TokenFile(token_file)
    proxy = proxy_for(server, None, environ)
    context = tls_context(ca_file=ca_file)
    return Connection(server, context, token, proxy=proxy, refresh=token.refresh)


def kubeconfig_connection(*paths: Path, environ: Environ = os.environ) -> Connection:
    """The current context of the kubeconfig file(s) at `paths` (merged, the first wins)."""
    config = _merge(paths)
    name = config["current-context"]
    if not name:
        raise ConfigError(f"kubeconfig {_names(paths)}: no current-context")
    context = _entry(config, "contexts", name, paths)
    where = f"contexts[{name}]"
    _check_keys(context.value, CONTEXT_KEYS, where)
    cluster_name = context.value.get("cluster")
    cluster = _entry(config, "clusters", cluster_name, paths)
    user_name = context.value.get("user")
    user = _entry(config, "users", user_name, paths) if user_name else _Entry({}, cluster.base)
    return _connection(cluster, f"clusters[{cluster_name}]", user, f"users[{user_name}]", environ)


# --- reading ----------------------------------------------------------------------------------
def _merge(paths: tuple[Path, ...]) -> dict[str, Any]:
    import yaml

    merged: dict[str, Any] = {"clusters": {}, "users": {}, "contexts": {}, "current-context": ""}
    for path in paths:
        try:
            config = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"cannot read kubeconfig {path}: {exc}") from exc
        if not isinstance(config, dict):
            raise ConfigError(f"kubeconfig {path}: not a mapping")
        _check_keys(config, TOP_KEYS, f"kubeconfig {path}:")
        for section, key in (("clusters", "cluster"), ("users", "user"), ("contexts", "context")):
            for item in config.get(section) or []:
                if isinstance(item, dict) and isinstance(item.get(key) or {}, dict):
                    entry = _Entry(item.get(key) or {}, path.parent)
                    merged[section].setdefault(item.get("name"), entry)
        merged["current-context"] = merged["current-context"] or config.get("current-context")
    return merged


def _entry(config: dict[str, Any], section: str, name: Any, paths: tuple[Path, ...]) -> _Entry:
    found: _Entry | None = config[section].get(name)
    if found is None:
        raise ConfigError(f"kubeconfig {_names(paths)} has no {section[:-1]} named {name!r}")
    return found


def _check_keys(section: Mapping[str, Any], known: frozenset[str], where: str) -> None:
    for key in sorted(set(section) - known):
        why = REFUSED.get(key, "is not a setting the operator knows how to honour")
        raise ConfigError(f"{where}.{key}: {why}".replace(":.", ": "))


def _names(paths: tuple[Path, ...]) -> str:
    return os.pathsep.join(str(p) for p in paths)


# --- building ---------------------------------------------------------------------------------
def _connection(
    cluster: _Entry, cluster_at: str, user: _Entry, user_at: str, environ: Environ
) -> Connection:
    _check_keys(cluster.value, CLUSTER_KEYS, cluster_at)
    _check_keys(user.value, USER_KEYS, user_at)
    c, u = cluster.value, user.value
    server = str(c.get("server") or "")
    scheme = urllib.parse.urlsplit(server).scheme
    if scheme not in ("http", "https"):
        raise ConfigError(f"{cluster_at}.server {server!r}: an http:// or https:// URL is needed")
    _check_combinations(c, cluster_at, u, user_at)
    proxy = proxy_for(server, c.get("proxy-url"), environ, f"{cluster_at}.proxy-url")
    make = _context_factory(cluster, u, user.base) if scheme == "https" else None
    context = make(None, None) if make else None
    connection = Connection(
        server, context, server_name=c.get("tls-server-name"), proxy=proxy,
        headers=_impersonation(u, user_at),
    )  # fmt: skip
    if u.get("exec"):
        _with_exec(connection, u["exec"], f"{user_at}.exec", user.base, c, make)
    else:
        _with_token(connection, u, user.base)
    return connection


def _check_combinations(
    c: dict[str, Any], cluster_at: str, u: dict[str, Any], user_at: str
) -> None:
    """What client-go refuses too: settings that cannot all be honoured at once."""
    if c.get("insecure-skip-tls-verify") and (
        c.get("certificate-authority") or c.get("certificate-authority-data")
    ):
        raise ConfigError(
            f"{cluster_at}: insecure-skip-tls-verify with a certificate-authority: "
            "choose one (verify against the CA, or skip verification)"
        )
    token = [k for k in ("token", "tokenFile") if u.get(k)]
    basic = [k for k in ("username", "password") if u.get(k)]
    if token and basic:
        raise ConfigError(f"{user_at}: {token[0]} and {basic[0]}: a bearer token or basic auth")
    if u.get("exec") and (token or basic):
        raise ConfigError(f"{user_at}: exec and {(token + basic)[0]}: one source of credentials")
    cert = bool(u.get("client-certificate") or u.get("client-certificate-data"))
    key = bool(u.get("client-key") or u.get("client-key-data"))
    if cert != key:
        missing = "client-key" if cert else "client-certificate"
        raise ConfigError(f"{user_at}.{missing} is missing (a client certificate needs both)")
    for key_name in ("as-uid", "as-groups", "as-user-extra"):
        if u.get(key_name) and not u.get("as"):
            raise ConfigError(f"{user_at}.{key_name} needs `as` (the user to impersonate)")


def _context_factory(
    cluster: _Entry, user: dict[str, Any], user_base: Path
) -> Callable[[bytes | None, bytes | None], ssl.SSLContext]:
    """Makes the TLS context: the cluster's CA, and the user's certificate, or the one given."""
    c = cluster.value

    def make(cert: bytes | None, key: bytes | None) -> ssl.SSLContext:
        own = cert is None
        return tls_context(
            ca_file=_path(c.get("certificate-authority"), cluster.base),
            ca_data=_decoded(c.get("certificate-authority-data")),
            cert_data=_decoded(user.get("client-certificate-data")) if own else cert,
            key_data=_decoded(user.get("client-key-data")) if own else key,
            cert_file=_path(user.get("client-certificate"), user_base) if own else None,
            key_file=_path(user.get("client-key"), user_base) if own else None,
            insecure=bool(c.get("insecure-skip-tls-verify")),
        )

    return make


def _with_token(connection: Connection, user: dict[str, Any], base: Path) -> None:
    if user.get("tokenFile"):  # client-go: the file wins over an inline token
        token = TokenFile(str(_path(user["tokenFile"], base)))
        connection.authorization, connection.refresh = token, token.refresh
    elif user.get("token"):
        value = f"Bearer {user['token']}"
        connection.authorization = lambda: value
    elif user.get("username") or user.get("password"):
        pair = f"{user.get('username', '')}:{user.get('password', '')}".encode()
        value = f"Basic {base64.b64encode(pair).decode()}"
        connection.authorization = lambda: value


def _with_exec(
    connection: Connection,
    plugin: Any,
    where: str,
    base: Path,
    cluster: dict[str, Any],
    make: Callable[[bytes | None, bytes | None], ssl.SSLContext] | None,
) -> None:
    from trainop_core.operator.execcred import ExecCredentials

    if not isinstance(plugin, dict):
        raise ConfigError(f"{where} must be a mapping")

    def make_context(cert: bytes, key: bytes) -> ssl.SSLContext:
        if make is None:
            raise ConfigError(f"{where}: a client certificate needs an https server")
        return make(cert, key)

    credentials = ExecCredentials(
        plugin, where=where, base=base, context=connection.context,
        make_context=make_context, cluster=_cluster_info(cluster),
    )  # fmt: skip
    connection.authorization = credentials.authorization
    connection.refresh = credentials.refresh
    if connection.context is not None:
        connection.context_source = credentials.context


def _cluster_info(cluster: dict[str, Any]) -> dict[str, Any]:
    """The ExecCredential's spec.cluster (provideClusterInfo), as client-go fills it."""
    info: dict[str, Any] = {"server": cluster.get("server")}
    for key, name in (
        ("tls-server-name", "tls-server-name"),
        ("insecure-skip-tls-verify", "insecure-skip-tls-verify"),
        ("proxy-url", "proxy-url"),
        ("disable-compression", "disable-compression"),
    ):
        if cluster.get(key):
            info[name] = cluster[key]
    if cluster.get("certificate-authority-data"):
        info["certificate-authority-data"] = cluster["certificate-authority-data"]
    extension = _exec_extension(cluster.get("extensions"))
    if extension is not None:
        info["config"] = extension
    return info


def _exec_extension(extensions: Any) -> Any:
    for item in extensions or []:
        if isinstance(item, dict) and item.get("name") == "client.authentication.k8s.io/exec":
            return item.get("extension")
    return None


def _impersonation(user: dict[str, Any], where: str) -> tuple[tuple[str, str], ...]:
    """`as`, `as-uid`, `as-groups`, `as-user-extra` as Impersonate-* headers (a group or an
    extra value a header each, as client-go sends them)."""
    headers: list[tuple[str, str]] = []
    if user.get("as"):
        headers.append(("Impersonate-User", str(user["as"])))
    if user.get("as-uid"):
        headers.append(("Impersonate-Uid", str(user["as-uid"])))
    groups = user.get("as-groups") or []
    if not isinstance(groups, list):
        raise ConfigError(f"{where}.as-groups must be a list of group names")
    headers += [("Impersonate-Group", str(group)) for group in groups]
    extra = user.get("as-user-extra") or {}
    if not isinstance(extra, dict):
        raise ConfigError(f"{where}.as-user-extra must map keys to lists of values")
    for key, values in extra.items():
        name = "Impersonate-Extra-" + urllib.parse.quote(str(key), safe=_TOKEN_CHARS)
        for value in values if isinstance(values, list) else [values]:
            headers.append((name, str(value)))
    return tuple(headers)


# --- proxies ----------------------------------------------------------------------------------
def proxy_for(
    server: str, proxy_url: Any, environ: Environ, where: str = "proxy-url"
) -> Proxy | None:
    """The proxy to reach `server` through: the kubeconfig's `proxy_url` if set, else the
    environment's (see the module docstring), else None."""
    if proxy_url:
        return _proxy(str(proxy_url), where)
    parts = urllib.parse.urlsplit(server)
    names = (
        ("HTTPS_PROXY", "https_proxy") if parts.scheme == "https" else ("HTTP_PROXY", "http_proxy")
    )
    name = next((n for n in names if environ.get(n)), "")
    if not name:
        return None
    port = parts.port or (443 if parts.scheme == "https" else 80)
    no_proxy = environ.get("NO_PROXY") or environ.get("no_proxy") or ""
    if bypasses_proxy(parts.hostname or "", port, no_proxy):
        return None
    return _proxy(environ[name], name)


def bypasses_proxy(host: str, port: int, no_proxy: str) -> bool:
    """Go's ProxyFromEnvironment rule: is `host:port` reached directly, given NO_PROXY?"""
    host = host.lower().strip("[]")
    ip = _ip(host)
    if host == "localhost" or (ip is not None and ip.is_loopback):
        return True
    for raw in no_proxy.split(","):
        entry = raw.strip().lower()
        if entry == "*":
            return True
        if not entry:
            continue
        if "/" in entry:
            try:
                if ip is not None and ip in ipaddress.ip_network(entry, strict=False):
                    return True
            except ValueError:
                pass
            continue
        name, entry_port = _split_port(entry)
        if entry_port and entry_port != str(port):
            continue
        if _ip(name) is not None:
            if ip == _ip(name):
                return True
            continue
        name = name.removeprefix("*")
        if name.startswith("."):
            if host.endswith(name):
                return True
        elif host == name or host.endswith("." + name):
            return True
    return False


def _proxy(url: str, where: str) -> Proxy:
    if "://" not in url:  # Go reads a bare host:port as an http:// proxy
        url = "http://" + url
    parts = urllib.parse.urlsplit(url)
    if parts.scheme in ("socks5", "socks5h"):
        raise ConfigError(f"{where} {url!r}: SOCKS proxies are not supported; use an http:// proxy")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{where} {url!r}: an http:// or https:// proxy URL is needed")
    authorization = ""
    if parts.username is not None:
        pair = (
            f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
        )
        authorization = "Basic " + base64.b64encode(pair.encode()).decode()
    tls = parts.scheme == "https"
    return Proxy(parts.hostname, parts.port or (443 if tls else 80), authorization, where, tls)


def _split_port(entry: str) -> tuple[str, str]:
    if entry.startswith("["):  # [v6]:port
        name, _, rest = entry[1:].partition("]")
        return name, rest.removeprefix(":")
    if entry.count(":") == 1:
        name, _, port = entry.partition(":")
        return name, port
    return entry, ""


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _path(value: Any, base: Path) -> str | None:
    if not value:
        return None
    candidate = Path(str(value)).expanduser()
    return str(candidate if candidate.is_absolute() else base / candidate)


def _decoded(data: Any) -> bytes | None:
    return base64.b64decode(data) if data else None
