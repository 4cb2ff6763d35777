#!/bin/sh
# Makes the certificates of the TLS tests in DIR (created if missing): a
# test CA (ca.crt, ca.key), a server certificate it signs for 127.0.0.1 and
# localhost (server.crt, server.key) and a client certificate (client.crt,
# client.key), all ECDSA P-256, valid for one day. Each client suite's
# harness runs it in a temporary folder of its own before it starts a
# TLS-only server (docs/operations.md, "TLS and ACL users"). Takes well
# under a second.
set -eu
dir=${1:?usage: tls-test-certs.sh DIR}
mkdir -p "$dir"
cd "$dir"
ec="-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
# shellcheck disable=SC2086
openssl req -x509 $ec -keyout ca.key -out ca.crt -days 1 \
    -subj "/CN=dlock test CA" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
for who in server client; do
    # shellcheck disable=SC2086
    openssl req $ec -keyout "$who.key" -out "$who.csr" -subj "/CN=dlock test $who" 2>/dev/null
done
printf '%s\n' "basicConstraints=CA:FALSE" "keyUsage=critical,digitalSignature" \
    "extendedKeyUsage=serverAuth" "subjectAltName=IP:127.0.0.1,DNS:localhost" >server.ext
printf '%s\n' "basicConstraints=CA:FALSE" "keyUsage=critical,digitalSignature" \
    "extendedKeyUsage=clientAuth" >client.ext
for who in server client; do
    openssl x509 -req -in "$who.csr" -CA ca.crt -CAkey ca.key -CAcreateserial \
        -days 1 -extfile "$who.ext" -out "$who.crt" 2>/dev/null
    rm -f "$who.csr" "$who.ext"
done
rm -f ca.srl
# The keys as PKCS#8 PEM ("BEGIN PRIVATE KEY"), which every client library
# reads (openssl req writes that already; stated here, not assumed).
for key in ca.key server.key client.key; do
    openssl pkcs8 -topk8 -nocrypt -in "$key" -out "$key.p8"
    mv "$key.p8" "$key"
done
chmod 600 ./*.key
