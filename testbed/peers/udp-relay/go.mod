module quiclab/peers/udprelay

go 1.24
