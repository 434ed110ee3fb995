module quiclab/peers/xnetquic

go 1.25.0

require golang.org/x/net v0.56.0

require (
	golang.org/x/crypto v0.53.0 // indirect
	golang.org/x/sys v0.46.0 // indirect
)
