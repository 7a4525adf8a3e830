#!/bin/sh
# make-certs.sh DIR: a test CA (DIR/ca.pem) and a certificate for 127.0.0.1 signed by it
# (DIR/server.pem, DIR/server.key), as a BMC's self-signed setup; valid for one day.
set -eu
d=$1
mkdir -p "$d"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
    -subj /CN=rust-energy-test-ca -keyout "$d/ca.key" -out "$d/ca.pem" 2>/dev/null
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -subj /CN=127.0.0.1 -keyout "$d/server.key" -out "$d/server.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' >"$d/ext"
openssl x509 -req -in "$d/server.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -CAcreateserial \
    -days 1 -extfile "$d/ext" -out "$d/server.pem" 2>/dev/null
