! An unmodified Fortran MPI program: MPI_ALLREDUCE of REAL (out of place and in
! place, MPI_IN_PLACE being Fortran's own) and MPI_REDUCE to rank 0, each rank
! writing its input and results (tests/py/test_mpi.py checks them).
!   mpirun -np P allreduce_f COUNT SEED DIR
! writes DIR/in<rank>.f32 and DIR/out<rank>.f32: the allreduce out of place,
! in place, then (rank 0) the reduce. Built twice: with `use mpi`, and with
! -DF08 as `use mpi_f08` (typed handles; its own entry points, mpi_*_f08_).
program allreduce_f
#ifdef F08
  use mpi_f08
#else
  use mpi
#endif
  implicit none
  integer :: ierr, rank, n, seed, i, u
  real, allocatable :: x(:), y(:)
  character(len=4096) :: arg, dir, path

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call get_command_argument(1, arg)
  read (arg, *) n
  call get_command_argument(2, arg)
  read (arg, *) seed
  call get_command_argument(3, dir)
  allocate (x(n), y(n))
  do i = 1, n
    ! 20-bit integers times 2**(-40..-1), either sign: exact in REAL, sums that depend on the order
    x(i) = real(mod(i * 7919 + rank * 104729 + seed * 13, 2000003) - 1000001) * 2.0**(mod(i * 31 + rank * 17, 40) - 40)
  end do
  write (path, '(a,a,i0,a)') trim(dir), '/in', rank, '.f32'
  open (newunit=u, file=path, access='stream', form='unformatted', status='replace')
  write (u) x
  close (u)
  call MPI_Allreduce(x, y, n, MPI_REAL, MPI_SUM, MPI_COMM_WORLD, ierr)
  write (path, '(a,a,i0,a)') trim(dir), '/out', rank, '.f32'
  open (newunit=u, file=path, access='stream', form='unformatted', status='replace')
  write (u) y
  y = x
  call MPI_Allreduce(MPI_IN_PLACE, x, n, MPI_REAL, MPI_SUM, MPI_COMM_WORLD, ierr)
  write (u) x
  x = 0
  call MPI_Reduce(y, x, n, MPI_REAL, MPI_SUM, 0, MPI_COMM_WORLD, ierr)
  if (rank == 0) write (u) x
  close (u)
  call MPI_Finalize(ierr)
end program allreduce_f
