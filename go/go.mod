module shmring

go 1.19
