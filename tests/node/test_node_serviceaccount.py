"""A pod on a process node calls the API as its ServiceAccount, as on a real kubelet: the
projected ``kube-api-access-*`` volume (a bound token, ``kube-root-ca.crt``, the namespace) at
/var/run/secrets/kubernetes.io/serviceaccount and ``KUBERNETES_SERVICE_HOST``/``PORT`` leading,
through the `kubernetes` Service's cluster IP, to kube-apiserver."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from nodekit import NodeCluster, pod

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not on PATH")
RBAC = "/apis/rbac.authorization.k8s.io/v1/namespaces"

# Reads its own pod with the token (urllib, the CA file), then with kubectl's in-cluster config,
# then tries what its Role does not allow.
CALLER = """import json, os, ssl, stat, subprocess, urllib.error, urllib.request
sa = '/var/run/secrets/kubernetes.io/serviceaccount'
ns = open(sa + '/namespace').read()
print('namespace=' + ns)
print('token-mode=' + oct(stat.S_IMODE(os.stat(sa + '/token').st_mode)))
print('port-var=' + os.environ['KUBERNETES_PORT_443_TCP'])
host, port = os.environ['KUBERNETES_SERVICE_HOST'], os.environ['KUBERNETES_SERVICE_PORT']
context = ssl.create_default_context(cafile=sa + '/ca.crt')
def get(path):
    request = urllib.request.Request('https://%s:%s%s' % (host, port, path))
    request.add_header('Authorization', 'Bearer ' + open(sa + '/token').read())
    try:
        with urllib.request.urlopen(request, context=context, timeout=30) as answer:
            return answer.status, json.load(answer)
    except urllib.error.HTTPError as err:
        return err.code, {}
me = get('/api/v1/namespaces/%s/pods/%s' % (ns, os.environ['HOSTNAME']))[1]
print('self=' + me['metadata']['name'])
print('secrets=%d' % get('/api/v1/namespaces/%s/secrets' % ns)[0])
done = subprocess.run(['kubectl', 'get', 'pod', os.environ['HOSTNAME'], '-o',
                       'jsonpath={.spec.serviceAccountName}'], capture_output=True, text=True)
print('kubectl=' + done.stdout + done.stderr.strip())
"""


def test_a_pod_reads_itself_with_its_service_account_token_and_in_cluster_kubectl(
    node_cluster: NodeCluster, ns: str
) -> None:
    rest = node_cluster.cp.rest
    rest.create(f"/api/v1/namespaces/{ns}/serviceaccounts", {"metadata": {"name": "reader"}})
    rule = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}
    rest.create(f"{RBAC}/{ns}/roles", {"metadata": {"name": "reader"}, "rules": [rule]})
    binding = {
        "metadata": {"name": "reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": ns}],
    }
    rest.create(f"{RBAC}/{ns}/rolebindings", binding)
    host_had = Path("/var/run/secrets/kubernetes.io").exists()  # a CI job may itself be a pod
    built = pod("caller").python(CALLER).spec(serviceAccountName="reader")
    node_cluster.create(ns, built.build())
    done = node_cluster.wait_phase(ns, "caller", ("Succeeded", "Failed"), timeout=120)
    text = node_cluster.log(ns, "caller")
    assert done["status"]["phase"] == "Succeeded", (text, done["status"])
    said = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    service = rest.get("/api/v1/namespaces/default/services/kubernetes")["spec"]["clusterIP"]
    assert said == {
        "namespace": ns,
        "token-mode": "0o600",
        "port-var": f"tcp://{service}:443",
        "self": "caller",
        "secrets": "403",  # the ServiceAccount's identity, not the node's
        "kubectl": "reader",
    }
    volumes = [v["name"] for v in done["spec"]["volumes"]]
    assert any(name.startswith("kube-api-access-") for name in volumes)  # admission added it
    # The mountPath was made in the container's mount namespace only: host programs (the v1
    # SDK among them) would think they run in a pod if it appeared on this machine.
    assert Path("/var/run/secrets/kubernetes.io").exists() == host_had


def test_a_pod_that_opts_out_gets_no_token(node_cluster: NodeCluster, ns: str) -> None:
    token = "/var/run/secrets/kubernetes.io/serviceaccount/token"
    source = f"import os; print(os.path.exists({token!r}))"
    built = pod("quiet").python(source).spec(automountServiceAccountToken=False)
    node_cluster.create(ns, built.build())
    node_cluster.wait_phase(ns, "quiet", ("Succeeded",))
    assert node_cluster.log(ns, "quiet") == "False"
